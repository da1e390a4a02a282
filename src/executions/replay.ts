// The pure steps of replaying an execution (ExecutionService.replay): which kind of replay a
// request asks for, the outputs a seeded rerun starts from, and why a reset point could not be
// read. No I/O, so they are unit tested on their own (replay.test.ts).
import { conflict } from '../platform/errors.js';
import { temporalFailure } from '../temporal/connection.js';
import type { TimelineRow } from './execution.mirror.js';
import { RunStillOpen } from './reset-point.js';
import { branchOf } from '../../workflows/run-state.js';

/** What a replay request asks for: the whole run again, a rerun from a node seeded with recorded outputs, or a Temporal reset. */
export type ReplayMode = 'rerun' | 'rerun_seeded' | 'reset';

export function replayMode(body: { from_node_id?: string; with_payload?: unknown }): ReplayMode {
  return body.from_node_id === undefined ? 'rerun' : body.with_payload !== undefined ? 'rerun_seeded' : 'reset';
}

/**
 * The recorded outputs of the nodes upstream of the node a seeded rerun starts at. Each upstream
 * node must have succeeded or been skipped in the original run; otherwise the rerun is refused.
 */
export function replaySeed(
  timeline: Pick<TimelineRow, 'node_id' | 'status' | 'output'>[],
  upstream: Set<string>,
  executionId: number | string,
): Record<string, unknown> {
  const seed: Record<string, unknown> = {};
  for (const t of timeline) if (upstream.has(t.node_id) && t.status === 'success') seed[t.node_id] = t.output;
  for (const id of upstream) {
    if (!(id in seed) && !timeline.some((t) => t.node_id === id && t.status === 'skipped')) {
      throw conflict('node_not_run', `Upstream node ${id} has no recorded output in execution ${executionId}`);
    }
  }
  return seed;
}

/**
 * Why the reset point of execution `executionId` could not be read, as the API answers it: its
 * run is not closed yet, or Temporal no longer has its history. Other errors are answered as they are.
 */
export function resetPointFailure(err: unknown, executionId: number | string): unknown {
  if (err instanceof RunStillOpen) {
    return conflict(
      'execution_running',
      `Temporal has not closed the run of execution ${executionId} yet (its last workflow task is still in progress); try again shortly`,
    );
  }
  if (temporalFailure(err)?.kind !== 'missing') return err;
  return conflict(
    'node_not_run',
    `Temporal no longer has the history of execution ${executionId} (past the namespace's retention); replay it with with_payload instead`,
  );
}

/**
 * A replay's reused outputs as the run's input carries them: small ones inline (`seed`), larger
 * ones by reference to the new execution's timeline, where the replay copies them (`seedRefs`,
 * with the branch each was finished on, which the run cannot read from a value it does not hold).
 */
export function splitSeed(
  seed: Record<string, unknown>,
  inlineBytes: number,
): { seed: Record<string, unknown>; seedRefs?: Record<string, { branch?: string }> } {
  const inline: Record<string, unknown> = {};
  const refs: Record<string, { branch?: string }> = {};
  for (const [id, output] of Object.entries(seed)) {
    if (Buffer.byteLength(JSON.stringify(output ?? null)) <= inlineBytes) {
      inline[id] = output;
      continue;
    }
    const branch = branchOf(output);
    refs[id] = branch === undefined ? {} : { branch };
  }
  return Object.keys(refs).length ? { seed: inline, seedRefs: refs } : { seed: inline };
}
