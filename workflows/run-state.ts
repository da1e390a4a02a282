// Pure steps of the graph workflow's run state (no Temporal API, so they are unit tested on their
// own in run-state.test.ts); the workflow issues the commands.
import type { GraphNode, RunGraphInput, RunGraphResult } from './defs.js';
import type { RunValues } from './run-values.js';
import type { GraphState } from './graph.js';

/** A node a cancel interrupted, with the workflow time it started. */
export interface InterruptedNode {
  id: string;
  type: string;
  startedAt: number;
}

/** The branch a reused output was finished on: its `branch`, else a condition's `result`. */
export function branchOf(output: unknown): string | undefined {
  const branch = (output as { branch?: unknown } | null)?.branch ?? (output as { result?: unknown } | null)?.result;
  return branch === undefined ? undefined : String(branch);
}

/**
 * Seeds the run with the outputs of the nodes a replay reuses: each counts as finished, on the
 * branch its output names (`branch`, else a condition's `result`), or, for those in `failed`
 * (a failure its node handed to its "error" edges), as failed into those edges.
 */
export function seedRun(
  state: GraphState,
  values: Pick<RunValues, 'set'>,
  seed: Record<string, unknown> | undefined,
  /** Reused outputs kept in the execution's timeline, too large for the run's input. */
  seedRefs?: RunGraphInput['seedRefs'],
  failed: readonly string[] = [],
): void {
  const finish = (id: string, branch: string | undefined) => (failed.includes(id) ? state.seedFailure(id) : state.seed(id, branch));
  for (const [id, output] of Object.entries(seed ?? {})) {
    values.set(id, { output }, { last: false });
    finish(id, branchOf(output));
  }
  for (const [id, { branch }] of Object.entries(seedRefs ?? {})) {
    values.set(id, { ref: { node: id, bytes: 0 } }, { last: false });
    finish(id, branch);
  }
}

/**
 * The failures a run handled (on_error "continue" or "branch"), with the output each became: the
 * execution record keeps them, so a replay can reuse them.
 */
export function handledFailures(
  handled: readonly string[],
  nodes: Map<string, GraphNode>,
  outputs: Record<string, unknown>,
): { id: string; type: string; output: unknown }[] {
  // One missing from `outputs` is held by reference: its activity stored the whole `{error}` already.
  return handled.filter((id) => id in outputs).map((id) => ({ id, type: nodes.get(id)!.type, output: outputs[id] }));
}

/** How a run ended: a cancel wins over a failure, a failure over a node that failed and continued. */
export function runStatus(run: { cancelled: unknown; failure: RunGraphResult['error']; partial: boolean }): RunGraphResult['status'] {
  return run.cancelled ? 'cancelled' : run.failure ? 'failed' : run.partial ? 'partial' : 'success';
}

/** The nodes that did not run: those on branches not taken, and every unfinished one when the run stopped early. */
export function notRunNodes(state: GraphState, nodes: Map<string, GraphNode>, stopped: boolean): { id: string; type: string }[] {
  return [...state.skippedNodes(), ...(stopped ? state.unfinished() : [])].map((id) => ({ id, type: nodes.get(id)!.type }));
}
