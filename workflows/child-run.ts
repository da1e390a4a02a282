// A run_workflow node: a child run of another workflow, in a graph or for a for_each item. Workflow code.
import { ApplicationFailure, executeChild, isCancellation, workflowInfo } from '@temporalio/workflow';
import {
  RUN_GRAPH_WORKFLOW,
  childWorkflowId,
  itemChildWorkflowId,
  type GraphNode,
  type RunGraphInput,
  type RunGraphResult,
  type RunNodeOutput,
} from './defs.js';
import { control, localControl } from './control.js';
import { CODE } from './error-codes.js';
import { nodeErrorOf } from './node-errors.js';
import { jsonBytes } from './run-values.js';
import { boundsOf, contextOf, local, other, pause, type ItemScope, type Scope } from './run-scope.js';

/** A sub-workflow node: a child run of the referenced workflow, its outcome recorded as the node's. */
export async function runChild(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  if (run.item) return runItemChild(run, run.item, node);
  const startedAt = Date.now();
  const child = await other(run, () => control.prepareChildRun(node, run.values.contextFor(node), workflowInfo().runId, boundsOf(run)));
  try {
    // A child run may last as long as its own waits: meanwhile this node holds no place.
    const result = await pause(run, () =>
      other(run, () =>
        executeChild(RUN_GRAPH_WORKFLOW, {
          workflowId: childWorkflowId(workflowInfo().workflowId, node.id),
          args: [childInput(child)],
        }),
      ),
    );
    const output = childOutput(result);
    // A child's large output stays out of this run's history too: the activity copies it into
    // this node's entry and answers a reference.
    const kept = await local(run, () =>
      localControl.recordNodeEnd(node, workflowInfo().runId, {
        status: 'success',
        output,
        startedAt,
        ...(result.lastOutputRef ? { outputRef: { ...result.lastOutputRef, execution: result.lastOutputRef.execution ?? result.executionId } } : {}),
        ...boundsOf(run),
      }),
    );
    return kept?.ref ? { ref: kept.ref } : { output, ...(kept?.bytes !== undefined ? { bytes: kept.bytes } : {}) };
  } catch (err) {
    if (!isCancellation(err))
      await local(run, () => localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'failed', error: nodeErrorOf(err), startedAt }));
    throw err;
  }
}

/**
 * A run_workflow node of a for_each body: the child is named after the item, and its payload and
 * output stay with the item when too large for history (the body has no timeline entries).
 */
async function runItemChild(run: Scope, item: ItemScope, node: GraphNode): Promise<RunNodeOutput> {
  const inlineBytes = run.began.bounds!.inlineBytes;
  const child = await other(run, () => control.prepareItemChildRun(node, contextOf(run, node), item.key, inlineBytes));
  const result = await other(run, () =>
    executeChild(RUN_GRAPH_WORKFLOW, {
      workflowId: itemChildWorkflowId(item.itemsWorkflowId, item.key.index, node.id),
      args: [childInput(child)],
    }),
  );
  const output = childOutput(result);
  if (!result.lastOutputRef && jsonBytes(output) <= inlineBytes) return { output };
  return other(run, () => control.keepItemOutput(item.key, node.id, output, result.lastOutputRef));
}

/** What a child run starts with, as its prepare step answered. */
function childInput(child: { workflowId: number; payload?: unknown; parentExecutionId?: number; payloadRef?: RunGraphInput['payloadRef'] }): RunGraphInput {
  return {
    workflowId: child.workflowId,
    payload: child.payload ?? null,
    trigger: 'child',
    // Answers recorded before children knew their parent carry no parentExecutionId.
    ...(child.parentExecutionId !== undefined ? { parentExecutionId: child.parentExecutionId } : {}),
    ...(child.payloadRef ? { payloadRef: child.payloadRef } : {}),
  };
}

/** A run_workflow node's output: the child's execution, status and output; a failed child fails the node (node_failed). */
function childOutput(result: RunGraphResult): { execution_id: number; status: RunGraphResult['status']; output: unknown } {
  if (result.status === 'failed') throw ApplicationFailure.nonRetryable(`Child workflow failed: ${result.error?.message ?? ''}`, CODE.node_failed);
  return { execution_id: result.executionId, status: result.status, output: result.lastOutput ?? null };
}
