// What the activities of a graph run share about the values the run keeps out of Temporal's
// history (workflows/run-values.ts): reading back what a node's context names by reference, and
// answering an output by reference when it is too large to go back through history.
import { ApplicationFailure } from '@temporalio/activity';
import type { ExecutionMirror } from '../src/executions/execution.mirror.js';
import type { NodeContext, RunNodeOutput } from '../workflows/defs.js';
import { CODE } from '../workflows/error-codes.js';
import { jsonBytes } from './node-outcome.js';
import { patiently } from './patiently.js';

/**
 * A node's expression context with the values the workflow passed by reference read back from
 * the execution's record and timeline. A reference names this run's execution unless it says
 * otherwise (a child run's output); one that reads nothing is not there yet (retried).
 */
export async function contextValues(
  mirror: Pick<ExecutionMirror, 'readValues'>,
  executionId: number,
  context: NodeContext,
): Promise<{ trigger: unknown; nodes: Record<string, unknown> }> {
  const { refs } = context;
  if (!refs) return { trigger: context.trigger, nodes: context.nodes };
  const wanted = Object.entries(refs.nodes ?? {}).map(([id, r]) => ({ id, execution: r.execution ?? executionId, node: r.node }));
  const read = await patiently(() => mirror.readValues(executionId, wanted, refs.trigger === true));
  const nodes = { ...context.nodes };
  for (const w of wanted) {
    const key = `${w.execution}:${w.node}`;
    if (!read.outputs.has(key))
      throw ApplicationFailure.retryable(`The output of node ${w.node} is not in execution ${w.execution}'s timeline yet`, CODE.execution_not_ready);
    nodes[w.id] = read.outputs.get(key);
  }
  return { trigger: refs.trigger ? (read.trigger ?? null) : context.trigger, nodes };
}

/**
 * A node's outcome as its activity answers the workflow, the output being in its timeline entry
 * already: inline, or by reference when larger than `inlineBytes` (workflow code that keeps large
 * values out of history sets it; without it, inline as before).
 */
export function answer(nodeId: string, result: { output: unknown; branch?: string }, inlineBytes: number | undefined): RunNodeOutput {
  const branch = result.branch !== undefined ? { branch: result.branch } : {};
  if (inlineBytes === undefined) return { output: result.output, ...branch };
  const bytes = jsonBytes(result.output);
  return bytes > inlineBytes ? { ref: { node: nodeId, bytes }, ...branch } : { output: result.output, bytes, ...branch };
}
