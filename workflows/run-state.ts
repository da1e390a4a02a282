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
 * Seeds the run with the outputs of the nodes a replay starts after: each counts as finished, on
 * the branch its output names (`branch`, else a condition's `result`).
 */
export function seedRun(
  state: GraphState,
  values: Pick<RunValues, 'set'>,
  seed: Record<string, unknown> | undefined,
  /** Reused outputs kept in the execution's timeline, too large for the run's input. */
  seedRefs?: RunGraphInput['seedRefs'],
): void {
  for (const [id, output] of Object.entries(seed ?? {})) {
    values.set(id, { output });
    state.seed(id, branchOf(output));
  }
  for (const [id, { branch }] of Object.entries(seedRefs ?? {})) {
    values.set(id, { ref: { node: id, bytes: 0 } });
    state.seed(id, branch);
  }
}

/** How a run ended: a cancel wins over a failure, a failure over a node that failed and continued. */
export function runStatus(run: { cancelled: unknown; failure: RunGraphResult['error']; partial: boolean }): RunGraphResult['status'] {
  return run.cancelled ? 'cancelled' : run.failure ? 'failed' : run.partial ? 'partial' : 'success';
}

/** The nodes that did not run: those on branches not taken, and every unfinished one when the run stopped early. */
export function notRunNodes(state: GraphState, nodes: Map<string, GraphNode>, stopped: boolean): { id: string; type: string }[] {
  return [...state.skippedNodes(), ...(stopped ? state.unfinished() : [])].map((id) => ({ id, type: nodes.get(id)!.type }));
}
