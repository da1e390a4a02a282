// What the activities of a graph run share about the values the run keeps out of Temporal's
// history (workflows/run-values.ts): reading back what a node's context names by reference, and
// answering an output by reference when it is too large to go back through history.
import { ApplicationFailure } from '@temporalio/activity';
import type { ExecutionMirror } from '../src/executions/execution.mirror.js';
import type { ExpressionSandbox } from '../src/nodes/expression-sandbox.js';
import { itemId, type ExecutionItems } from '../src/executions/execution-items.store.js';
import type { NodeContext, RunNodeOutput } from '../workflows/defs.js';
import { CODE } from '../workflows/error-codes.js';
import { jsonBytes } from './node-outcome.js';
import { patiently } from './patiently.js';

/**
 * A node's expression context with the values the workflow passed by reference read back from
 * the execution's record and timeline, and inside a for_each body from its items (the item, and
 * body outputs kept with it). A reference names this run's execution unless it says otherwise (a
 * child run's output); one that reads nothing is not there yet (retried).
 */
export async function contextValues(
  mirror: Pick<ExecutionMirror, 'readValues'>,
  executionId: number,
  context: NodeContext,
  items?: Pick<ExecutionItems, 'read'>,
): Promise<{ trigger: unknown; nodes: Record<string, unknown>; item?: unknown; index?: number }> {
  const { refs } = context;
  const item = context.index !== undefined ? { item: context.item ?? null, index: context.index } : {};
  if (!refs) return { trigger: context.trigger, nodes: context.nodes, ...item };
  const all = Object.entries(refs.nodes ?? {});
  const wanted = all.filter(([, r]) => !r.item).map(([id, r]) => ({ id, execution: r.execution ?? executionId, node: r.node }));
  const kept = all.filter(([, r]) => r.item).map(([id, r]) => ({ id, item: r.item!, key: r.node }));
  const read = await patiently(() => mirror.readValues(executionId, wanted, refs.trigger === true));
  const nodes = { ...context.nodes };
  for (const w of wanted) {
    const key = `${w.execution}:${w.node}`;
    if (!read.outputs.has(key))
      throw ApplicationFailure.retryable(`The output of node ${w.node} is not in execution ${w.execution}'s timeline yet`, CODE.execution_not_ready);
    nodes[w.id] = read.outputs.get(key);
  }
  if (!kept.length && !refs.item) return { trigger: refs.trigger ? (read.trigger ?? null) : context.trigger, nodes, ...item };
  if (!items) throw ApplicationFailure.nonRetryable('A for_each item’s values were asked for outside a loop', CODE.validation_failed);
  const fromItems = await patiently(() => items.read(refs.item ? [refs.item] : [], kept));
  for (const k of kept) {
    const key = `${itemId(k.item)}:${k.key}`;
    if (!fromItems.kept.has(key)) throw ApplicationFailure.retryable(`The output of node ${k.key} is not kept with its item yet`, CODE.execution_not_ready);
    nodes[k.id] = fromItems.kept.get(key);
  }
  const itemValue = refs.item ? { item: fromItems.inputs.get(itemId(refs.item)) ?? null, index: refs.item.index } : item;
  return { trigger: refs.trigger ? (read.trigger ?? null) : context.trigger, nodes, ...itemValue };
}

/**
 * Evaluates `template` (a node's configuration, or a part of it) for a node of `execution`: its
 * `{{ }}` against the node's context (its values read back as contextValues does) and the
 * execution's id and workflow.
 */
export async function evaluateForNode(
  ports: {
    executionMirror: Pick<ExecutionMirror, 'readValues'>;
    expressions: Pick<ExpressionSandbox, 'resolve'>;
    executionItems?: Pick<ExecutionItems, 'read'>;
  },
  execution: { id: number; workflowId: number },
  context: NodeContext,
  template: unknown,
): Promise<unknown> {
  const values = await contextValues(ports.executionMirror, execution.id, context, ports.executionItems);
  return ports.expressions.resolve(template, { ...values, execution: { id: execution.id, workflow_id: execution.workflowId } });
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
