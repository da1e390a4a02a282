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
 * Seeds the run with the outputs of the nodes a replay reuses: each counts as finished, on the
 * branch its output names (`branch`, else a condition's `result`), or, for those in `failed`
 * (a failure its node handed to its "error" edges), as failed into those edges.
 */
export function seedRun(state: GraphState, outputs: Record<string, unknown>, seed: Record<string, unknown> | undefined, failed: readonly string[] = []): void {
  for (const [id, output] of Object.entries(seed ?? {})) {
    outputs[id] = output;
    if (failed.includes(id)) {
      state.seedFailure(id);
      continue;
    }
    const branch = (output as { branch?: unknown } | null)?.branch ?? (output as { result?: unknown } | null)?.result;
    state.seed(id, branch === undefined ? undefined : String(branch));
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
  return handled.map((id) => ({ id, type: nodes.get(id)!.type, output: outputs[id] }));
}

/** How a run ended: a cancel wins over a failure, a failure over a node that failed and continued. */
export function runStatus(run: { cancelled: unknown; failure: RunGraphResult['error']; partial: boolean }): RunGraphResult['status'] {
  return run.cancelled ? 'cancelled' : run.failure ? 'failed' : run.partial ? 'partial' : 'success';
}

/** The nodes that did not run: those on branches not taken, and every unfinished one when the run stopped early. */
export function notRunNodes(state: GraphState, nodes: Map<string, GraphNode>, stopped: boolean): { id: string; type: string }[] {
  return [...state.skippedNodes(), ...(stopped ? state.unfinished() : [])].map((id) => ({ id, type: nodes.get(id)!.type }));
}
