import { ApplicationFailure, CancellationScope, isCancellation, patched, upsertMemo, workflowInfo } from '@temporalio/workflow';
import {
  ERROR_BRANCH_PATCH,
  FIRST_STEP_ASKS,
  LEAN_HISTORY,
  PREPARED_FIRST_STEP,
  PREPARED_FIRST_STEP_PATCH,
  NODE_FINISHED_MEMO,
  NODE_FINISHED_MEMO_PATCH,
  NODE_HISTORY_MEMO,
  NODE_STARTED_MEMO,
  type NodeFinishedMemo,
  type GraphNode,
  type NodeError,
  type RunGraphInput,
  type OutputRef,
  type RunGraphResult,
  type RunNodeOutput,
} from './defs.js';
import { GraphState } from './graph.js';
import { LocalGate } from './local-gate.js';
import { RunValues } from './run-values.js';
import { CODE } from './error-codes.js';
import { handledFailures, notRunNodes, runStatus, seedRun } from './run-state.js';
import { runApproval } from './approval.js';
import { runChild } from './child-run.js';
import { localControl } from './control.js';
import { runTimer } from './delay.js';
import { runLoop } from './for-each.js';
import { runActivity } from './node-activity.js';
import { keptInTimeline, nodeErrorOf } from './node-errors.js';
import { awaitsOf, type Scope } from './run-scope.js';
import { endCall, lastToRun, markedAtEnd, markedByTemporal, modeOf, runsLocally, startCall } from './run-modes.js';
import { runWaitForEvent } from './wait-for-event.js';

/** One run's state: the graph, what its nodes answered, and how the run ends so far. */
interface Run extends Scope {
  input: RunGraphInput;
}

/** Begins the execution record and the run's state, seeded with the outputs of a replay's seed. */
async function beginRun(input: RunGraphInput): Promise<Run> {
  // Bookkeeping runs as local activities: no task round trip through the server for each.
  // The answer says how this run marks its nodes; it is in the history (the activity's result,
  // or the run's input when the API prepared it), so a replay reads it back.
  const prepared = input.firstStep?.asked === PREPARED_FIRST_STEP && patched(PREPARED_FIRST_STEP_PATCH) ? input.firstStep.answer : undefined;
  const began = prepared ?? (await localControl.beginExecution(input, workflowInfo().runId, { ...FIRST_STEP_ASKS }));
  const { graph } = began;
  const run: Run = {
    input,
    began,
    lean: began.history === LEAN_HISTORY,
    nodes: new Map(graph.nodes.map((n) => [n.id, n])),
    state: new GraphState(graph),
    values: new RunValues(input.payload, began.bounds, input.payloadRef !== undefined || input.payloadInRecord === true),
    ...(began.bounds ? { gate: new LocalGate(), pauses: { waiting: 0 } } : {}),
    failure: undefined,
    partial: false,
    handled: [],
    cancelled: undefined,
    startedAt: new Map(),
    interrupted: [],
    ...(input.itemsFrom ? { itemsFrom: input.itemsFrom } : {}),
    modes: new Map(),
    calls: { inFlight: 0, task: -1 },
  };
  // A reused failure that took its error edges: only code that knows error edges reads it so.
  const seedErrors = input.seedErrors?.length && patched(ERROR_BRANCH_PATCH) ? input.seedErrors : [];
  seedRun(run.state, run.values, input.seed, input.seedRefs, seedErrors);
  return run;
}

/**
 * Runs one node the way its type runs. Not async itself: each way's promise is the one the caller
 * awaits, so a node's continuation takes as many steps as it always did and nodes that finish in
 * the same workflow task go on in the order they always did.
 */
function runNode(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  const mode = modeOf(run, node);
  if (mode === 'timer') return runTimer(run, node);
  if (mode === 'child') return runChild(run, node);
  if (mode === 'loop') return runLoop(run, node);
  // A wait's signal and an approval's decision reach the run's own workflow, not a loop's items: refused at save.
  if (run.item && (mode === 'wait' || mode === 'approval')) {
    return Promise.reject(ApplicationFailure.nonRetryable(`A ${node.type} node cannot run inside a for_each body`, CODE.validation_failed));
  }
  // Waits hold the run in workflow code of their own; they see the same expression context as an activity.
  if (mode === 'wait') return runWaitForEvent(node, run.values.contextFor(node), workflowInfo().runId, awaitsOf(run));
  if (mode === 'approval') return runApproval(node, run.values.contextFor(node), workflowInfo().runId, awaitsOf(run));
  return runActivity(run, node);
}

/** A marker in history: a reset knows this node finished in this workflow task. */
function markFinished(run: Scope, node: GraphNode): void {
  // A body's nodes are no reset points: their item is the record.
  if (run.item || markedByTemporal(run, node)) return;
  const memo = { [NODE_FINISHED_MEMO]: { node: node.id, local: runsLocally(run, node) } satisfies NodeFinishedMemo };
  // Its start is named in the same memo: one command where two were.
  if (markedAtEnd(run, node)) return upsertMemo({ [NODE_STARTED_MEMO]: node.id, [NODE_HISTORY_MEMO]: LEAN_HISTORY, ...memo });
  // Added after runs were already in flight: their histories carry no such command.
  if (run.lean || patched(NODE_FINISHED_MEMO_PATCH)) upsertMemo(memo);
}

/** A marker in history: replay-from-node resets to the workflow task that started this node. */
function markStarted(run: Scope, node: GraphNode): void {
  if (run.item || markedByTemporal(run, node) || markedAtEnd(run, node)) return;
  upsertMemo(run.lean ? { [NODE_STARTED_MEMO]: node.id, [NODE_HISTORY_MEMO]: LEAN_HISTORY } : { [NODE_STARTED_MEMO]: node.id });
}

/**
 * A failure the run handles (on_error continue or branch) becomes the node's output `{error}`.
 * When its data was too large for history the activity kept the whole `{error}` as the node's
 * output in the timeline and history carries a cut copy: later nodes read the whole by reference.
 */
function handle(run: Scope, id: string, error: NodeError, err: unknown): void {
  run.handled.push(id);
  if (run.began.bounds && keptInTimeline(err)) run.values.set(id, { ref: { node: id, bytes: 0 } }, { last: false });
  else run.values.set(id, { output: { error } }, { last: false, kept: false });
}

/** Runs one node and records what it answered, how it failed, or that a cancel interrupted it. */
export async function runOne(run: Scope, id: string): Promise<void> {
  const node = run.nodes.get(id)!;
  const call = startCall(run, node);
  markStarted(run, node);
  run.startedAt.set(id, Date.now());
  try {
    const result = await runNode(run, node);
    endCall(run, call);
    if (result.closed) run.closed = result.closed;
    if (result.partial) run.partial = true;
    if (run.item && result.attempts !== undefined) run.item.attempts = Math.max(run.item.attempts, result.attempts);
    run.values.set(id, result);
    run.state.complete(id, result.branch);
    markFinished(run, node);
  } catch (err) {
    endCall(run, call);
    if (isCancellation(err)) {
      run.cancelled ??= err;
      run.interrupted.push({ id, type: node.type, startedAt: run.startedAt.get(id)! });
      return;
    }
    markFinished(run, node);
    const error = nodeErrorOf(err);
    if (node.on_error === 'continue') {
      run.partial = true;
      handle(run, id, error, err);
      run.state.complete(id);
    } else if (node.on_error === 'branch' && patched(ERROR_BRANCH_PATCH)) {
      // The failure goes on along the node's "error" edges only; the run's outcome is theirs.
      handle(run, id, error, err);
      run.state.fail(id);
    } else {
      run.failure ??= { ...error, node_id: id };
    }
  }
}

/**
 * Starts every node as soon as it is ready, until none runs and none is ready (or the run failed
 * or was cancelled). A run with bounds keeps at most `maxRunning` nodes in flight; the others
 * wait in the order they became ready. A scope with shared `slots` (a for_each item's body) also
 * needs one of those to start a node, and waits for one to be given back when none is left.
 */
export async function runAll(run: Scope): Promise<void> {
  const running = new Map<string, Promise<void>>();
  const waiting: string[] = [];
  const limit = run.began.bounds?.maxRunning ?? Infinity;
  const { slots, pauses } = run;
  // Nodes that only wait hold no place (see pause).
  const inFlight = () => running.size - (pauses?.waiting ?? 0);
  for (;;) {
    if (!run.failure && !run.cancelled) {
      waiting.push(...run.state.ready());
      while (waiting.length && inFlight() < limit && (!slots || slots.take())) {
        const id = waiting.shift()!;
        if (lastToRun(run, id, running.size + waiting.length)) run.closing = id;
        running.set(
          id,
          runOne(run, id).finally(() => {
            running.delete(id);
            run.active = running.size;
            slots?.release();
          }),
        );
        run.active = running.size;
      }
    }
    const blocked = slots !== undefined && waiting.length > 0 && !run.failure && !run.cancelled;
    if (running.size === 0 && !blocked) break;
    // An item's body mostly runs one node at a time: awaited alone, without a race's promises.
    if (run.item && running.size === 1 && !blocked) await running.values().next().value;
    else if (pauses && waiting.length) await Promise.race([...running.values(), new Promise<void>((resolve) => (pauses.wake = resolve))]);
    else await Promise.race(blocked ? [...running.values(), slots.freed()] : running.values());
    if (pauses) pauses.wake = undefined;
  }
}

/** Writes the run's outcome to its execution record and answers it (a cancelled run ends cancelled). */
async function finishRun(run: Run): Promise<RunGraphResult> {
  const { failure, cancelled, interrupted } = run;
  const { lastOutput, lastOutputRef } = run.values.lastOutput();
  const status = runStatus(run);
  const notRun = notRunNodes(run.state, run.nodes, Boolean(failure || cancelled));
  // Its last node ended the record already, with this outcome.
  if (run.closed && status !== 'cancelled' && status !== 'failed') return resultOf(run, status, run.closed.executionId, lastOutput, lastOutputRef);
  // The record this run writes to: after a reset (from the API or by an operator in the Temporal
  // Web UI or CLI) that is the reset run's own execution, not the one beginExecution found.
  const finished = await CancellationScope.nonCancellable(() =>
    localControl.finishExecution(workflowInfo().runId, {
      status,
      skipped: notRun,
      ...(failure ? { error: failure } : {}),
      lastOutput,
      ...(lastOutputRef ? { lastOutputRef } : {}),
      ...(interrupted.length ? { cancelled: interrupted } : {}),
      ...(run.handled.length ? { handled: handledFailures(run.handled, run.nodes, run.values.inline()) } : {}),
    }),
  );
  if (cancelled) throw cancelled;
  // Runs recorded before finishExecution answered with the id have only beginExecution's.
  return resultOf(run, status, finished?.executionId ?? run.began.executionId, lastOutput, lastOutputRef);
}

/** What the run answers: its execution, status, last output (or where it is kept) and error. */
function resultOf(run: Run, status: RunGraphResult['status'], executionId: number, lastOutput: unknown, lastOutputRef: OutputRef | undefined): RunGraphResult {
  return {
    executionId,
    status,
    ...(lastOutput !== undefined ? { lastOutput } : {}),
    ...(lastOutputRef ? { lastOutputRef: { ...lastOutputRef, execution: lastOutputRef.execution ?? executionId } } : {}),
    ...(run.failure ? { error: run.failure } : {}),
  };
}

/**
 * Interprets one workflow graph. Deterministic: the graph comes from the first activity's
 * recorded result, nodes start in the order GraphState yields them, and every side effect
 * (each node) is an activity, a durable timer or a child workflow.
 */
export async function runGraph(input: RunGraphInput): Promise<RunGraphResult> {
  const run = await beginRun(input);
  await runAll(run);
  return finishRun(run);
}
