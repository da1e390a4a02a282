// A delay node. Workflow code.
import { sleep, workflowInfo } from '@temporalio/workflow';
import type { GraphNode, RunNodeOutput } from './defs.js';
import { localControl } from './control.js';
import { local, other, pause, type Scope } from './run-scope.js';

/** A delay node: a durable timer between its recorded start and end. */
export async function runTimer(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  // A body's delay has no entry of its own to record.
  if (run.item) return other(run, () => sleep(Number(node.config.duration_ms))).then(() => ({ output: { waited_ms: Number(node.config.duration_ms) } }));
  const startedAt = Date.now();
  await local(run, () => localControl.recordNodeStart(node, workflowInfo().runId));
  await pause(run, () => other(run, () => sleep(Number(node.config.duration_ms))));
  const output = { waited_ms: Number(node.config.duration_ms) };
  await local(run, () => localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'success', output, startedAt }));
  return { output };
}
