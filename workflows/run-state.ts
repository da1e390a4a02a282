// Pure steps of the graph workflow's run state (no Temporal API, so they are unit tested on their
// own in run-state.test.ts); the workflow issues the commands.
import type { GraphNode, RunGraphResult } from './defs.js';
import type { GraphState } from './graph.js';

/** A node a cancel interrupted, with the workflow time it started. */
export interface InterruptedNode {
  id: string;
  type: string;
  startedAt: number;
}

/**
 * Seeds the run with the outputs of the nodes a replay starts after: each counts as finished, on
 * the branch its output names (`branch`, else a condition's `result`).
 */
export function seedRun(state: GraphState, outputs: Record<string, unknown>, seed: Record<string, unknown> | undefined): void {
  for (const [id, output] of Object.entries(seed ?? {})) {
    outputs[id] = output;
    const branch = (output as { branch?: unknown } | null)?.branch ?? (output as { result?: unknown } | null)?.result;
    state.seed(id, branch === undefined ? undefined : String(branch));
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
