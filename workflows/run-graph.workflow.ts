import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  condition,
  executeChild,
  isCancellation,
  patched,
  proxyActivities,
  proxyLocalActivities,
  sleep,
  upsertMemo,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { ControlActivities, NodeActivities } from '../activities/index.js';
import {
  ERROR_BRANCH_PATCH,
  FIRST_STEP_ASKS,
  LEAN_HISTORY,
  PREPARED_FIRST_STEP,
  PREPARED_FIRST_STEP_PATCH,
  NODE_FINISHED_MEMO,
  NODE_FINISHED_MEMO_PATCH,
  NODE_HISTORY_MEMO,
  NODE_REFUSALS,
  NODE_STARTED_MEMO,
  RUN_GRAPH_WORKFLOW,
  childWorkflowId,
  DEFAULT_NODE_TIMEOUT_MS,
  nodeActivityId,
  nodeModeOf,
  runModeOf,
  type FailureKept,
  type NodeFinishedMemo,
  type GraphNode,
  type NodeError,
  type RunGraphInput,
  type NodeRunMode,
  type OutputRef,
  type RunCloses,
  type RunGraphResult,
  type RunNodeOutput,
} from './defs.js';
import { GraphState } from './graph.js';
import { LocalGate, type NodeAwaits } from './local-gate.js';
import { RunValues, jsonBytes } from './run-values.js';
import { CODE } from './error-codes.js';
import { handledFailures, notRunNodes, runStatus, seedRun } from './run-state.js';
import { runApproval } from './approval.js';
import { runLoop } from './for-each.js';
import { boundsOf, contextOf, local, other, type ItemScope, type Scope } from './run-scope.js';
import { runWaitForEvent } from './wait-for-event.js';

const control = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: [CODE.not_found, CODE.validation_failed] },
});
const localControl = proxyLocalActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20 },
});

function activityOptions(node: GraphNode): ActivityOptions {
  const retry = node.retry ?? {};
  return {
    activityId: nodeActivityId(node.id),
    startToCloseTimeout: node.timeout_ms ?? DEFAULT_NODE_TIMEOUT_MS,
    // Node activities heartbeat, so a killed worker is noticed in seconds, not at the timeout.
    heartbeatTimeout: 6_000,
    retry: {
      maximumAttempts: retry.max_attempts ?? 3,
      initialInterval: retry.initial_interval_ms ?? 1_000,
      backoffCoefficient: retry.backoff_coefficient ?? 2,
      ...(retry.max_interval_ms ? { maximumInterval: retry.max_interval_ms } : {}),
      nonRetryableErrorTypes: [...NODE_REFUSALS],
    },
  };
}

/** The failure a node ended with, as the timeline and the execution record show it. */
export function nodeErrorOf(err: unknown): NodeError {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure || cause instanceof ChildWorkflowFailure) cause = cause.cause ?? cause;
  if (cause instanceof ApplicationFailure) {
    // What the failure carries (an http_error's status and body of the answer) goes on with it.
    const data: unknown = cause.details?.[0];
    return { code: cause.type ?? CODE.node_failed, message: cause.message, ...(data && typeof data === 'object' ? { data } : {}) };
  }
  if (err instanceof ActivityFailure && err.cause?.name === 'TimeoutFailure') return { code: CODE.timeout, message: err.cause.message };
  return { code: CODE.node_failed, message: err instanceof Error ? err.message : String(err) };
}

/** The activity kept the failure's whole `{error}` in the timeline (history has its data cut to size). */
function keptInTimeline(err: unknown): boolean {
  let cause: unknown = err;
  while (cause instanceof ActivityFailure || cause instanceof ChildWorkflowFailure) cause = cause.cause ?? cause;
  return cause instanceof ApplicationFailure && (cause.details?.[1] as FailureKept | undefined)?.kept_in_timeline === true;
}

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

/** A delay node: a durable timer between its recorded start and end. */
async function runTimer(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  // A body's delay has no entry of its own to record.
  if (run.item) return other(run, () => sleep(Number(node.config.duration_ms))).then(() => ({ output: { waited_ms: Number(node.config.duration_ms) } }));
  const startedAt = Date.now();
  await local(run, () => localControl.recordNodeStart(node, workflowInfo().runId));
  await pause(run, () => other(run, () => sleep(Number(node.config.duration_ms))));
  const output = { waited_ms: Number(node.config.duration_ms) };
  await local(run, () => localControl.recordNodeEnd(node, workflowInfo().runId, { status: 'success', output, startedAt }));
  return { output };
}

/** A sub-workflow node: a child run of the referenced workflow, its outcome recorded as the node's. */
async function runChild(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  if (run.item) return runItemChild(run, run.item, node);
  const startedAt = Date.now();
  const child = await other(run, () => control.prepareChildRun(node, run.values.contextFor(node), workflowInfo().runId, boundsOf(run)));
  try {
    // A child run may last as long as its own waits: meanwhile this node holds no place.
    const result = await pause(run, () =>
      other(run, () =>
        executeChild(RUN_GRAPH_WORKFLOW, {
          workflowId: childWorkflowId(workflowInfo().workflowId, node.id),
          // Answers recorded before children knew their parent carry no parentExecutionId.
          args: [
            {
              workflowId: child.workflowId,
              payload: child.payload ?? null,
              trigger: 'child',
              ...(child.parentExecutionId !== undefined ? { parentExecutionId: child.parentExecutionId } : {}),
              ...(child.payloadRef ? { payloadRef: child.payloadRef } : {}),
            } satisfies RunGraphInput,
          ],
        }),
      ),
    );
    const output = { execution_id: result.executionId, status: result.status, output: result.lastOutput ?? null };
    if (result.status === 'failed') throw ApplicationFailure.nonRetryable(`Child workflow failed: ${result.error?.message ?? ''}`, CODE.node_failed);
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
      workflowId: `${item.itemsWorkflowId}/${item.key.index}/${node.id}`,
      args: [
        {
          workflowId: child.workflowId,
          payload: child.payload ?? null,
          trigger: 'child',
          parentExecutionId: child.parentExecutionId,
          ...(child.payloadRef ? { payloadRef: child.payloadRef } : {}),
        } satisfies RunGraphInput,
      ],
    }),
  );
  if (result.status === 'failed') throw ApplicationFailure.nonRetryable(`Child workflow failed: ${result.error?.message ?? ''}`, CODE.node_failed);
  const output = { execution_id: result.executionId, status: result.status, output: result.lastOutput ?? null };
  if (!result.lastOutputRef && jsonBytes(output) <= inlineBytes) return { output };
  return other(run, () => control.keepItemOutput(item.key, node.id, output, result.lastOutputRef));
}

/** Any other node: one activity, local for the node types the run was told to run locally. */
function runActivity(run: Scope, node: GraphNode): Promise<RunNodeOutput> {
  const { activityId: _id, heartbeatTimeout: _hb, ...localOptions } = activityOptions(node);
  if (run.item) return runItemActivity(run, run.item, node, localOptions);
  const input = { node, context: run.values.contextFor(node), ...boundsOf(run), ...closesOf(run, node) };
  if (runsLocally(run, node)) return local(run, () => proxyLocalActivities<NodeActivities>(localOptions).runNode(input));
  return other(run, () => proxyActivities<NodeActivities>(activityOptions(node)).runNode(input));
}

/** What the run's last node writes with its entry when it succeeds: the run's outcome then. */
function closesOf(run: Scope, node: GraphNode): { closes?: RunCloses } {
  if (run.closing !== node.id) return {};
  const handled = run.handled.length ? { handled: handledFailures(run.handled, run.nodes, run.values.inline()) } : {};
  return { closes: { status: run.partial ? 'partial' : 'success', skipped: notRunNodes(run.state, run.nodes, false), ...handled } };
}

/**
 * Whether `id`, about to start, is the run's last node: nothing else runs or waits, and no edge
 * leaves it, so once it succeeds nothing else can start and the run ends as closesOf says. Only a
 * graph run's own nodes (not a for_each item's) end its record.
 */
const lastToRun = (run: Scope, id: string, othersInFlight: number) =>
  !run.item && run.modes !== undefined && run.began.closeInNode === true && othersInFlight === 0 && !run.began.graph.edges.some((e) => e.from === id);

/**
 * A node of a for_each body: the activity is told its item (no timeline entry; a large output is
 * kept with the item) and answers its attempts. Its activity id is Temporal's own: the same node
 * runs for many items at once, and an id must be unique among a run's pending activities.
 */
function runItemActivity(run: Scope, item: ItemScope, node: GraphNode, localOptions: ActivityOptions): Promise<RunNodeOutput> {
  const input = { node, context: contextOf(run, node), ...boundsOf(run), item: item.key };
  const { activityId: _id, ...options } = activityOptions(node);
  return runsLocally(run, node)
    ? local(run, () => proxyLocalActivities<NodeActivities>(localOptions).runNode(input))
    : other(run, () => proxyActivities<NodeActivities>(options).runNode(input));
}

/** How a node module of its own (a wait, an approval) awaits: through the run's gate, with its bounds. */
const awaitsOf = (run: Scope): NodeAwaits => ({
  local: (start) => local(run, start),
  other: (start) => other(run, start),
  pause: (wait) => pause(run, wait),
  ...boundsOf(run),
});

/**
 * A node's wait for a signal or a timer, during which it holds no place among the run's nodes in
 * flight (runAll counts `pauses.waiting` out); once it ends, the node waits for a place again, so
 * its next steps stay within `maxRunning`. Runs without pauses (begun before them) wait as before.
 */
async function pause<T>(run: Scope, wait: () => Promise<T>): Promise<T> {
  const { pauses } = run;
  if (!pauses) return wait();
  pauses.waiting++;
  pauses.wake?.();
  try {
    return await wait();
  } finally {
    pauses.waiting--;
    const limit = run.began.bounds?.maxRunning ?? Infinity;
    if (run.active! - pauses.waiting > limit) await condition(() => run.active! - pauses.waiting <= limit);
  }
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

/**
 * How a node runs: as its start decided (startCall), else as the run's first step said for its
 * type (a for_each body's nodes: their items workflow was told each type's mode).
 */
const modeOf = (run: Scope, node: GraphNode): NodeRunMode => run.modes?.get(node.id) ?? nodeModeOf(run.began, node);

const runsLocally = (run: Scope, node: GraphNode) => modeOf(run, node) === 'local';

/** A regular activity's own events mark its start and end in the history of a lean run. */
const markedByTemporal = (run: Scope, node: GraphNode) => run.lean && modeOf(run, node) === 'activity';

/**
 * Decides how a graph run's node runs as it starts. A short call (a side effect the run's first
 * step allows to run locally) runs as a local activity only when no other such call is in flight
 * and none began or ended in this workflow task: a local activity's result is recorded when the
 * task that ran it completes, so at most one performed call at a time may be unrecorded, and a
 * worker that dies repeats only that one, as it would repeat a regular activity whose completion
 * it never reported. Otherwise it runs as a regular activity, whose scheduling completes the task
 * (and so records the calls before it). Deterministic: workflow task boundaries (the history's
 * length) fall at the same points on replay. Answers whether it is a local call.
 */
function startCall(run: Scope, node: GraphNode): boolean {
  const { modes, calls } = run;
  if (!modes || !calls) return false;
  let mode = nodeModeOf(run.began, node);
  const call = mode === 'local' && runModeOf(run.began, node.type) !== 'local';
  if (call && (calls.inFlight > 0 || calls.task === workflowInfo().historyLength)) mode = 'activity';
  modes.set(node.id, mode);
  if (mode !== 'local' || !call) return false;
  calls.inFlight++;
  calls.task = workflowInfo().historyLength;
  return true;
}

/** A local call ended (in this workflow task): the next one waits for a task of its own. */
function endCall(run: Scope, call: boolean): void {
  if (!call || !run.calls) return;
  run.calls.inFlight--;
  run.calls.task = workflowInfo().historyLength;
}

/** A local node marked once, when it ends (see BeganExecution.localMarkedAtEnd). */
const markedAtEnd = (run: Scope, node: GraphNode) => run.lean && run.began.localMarkedAtEnd === true && runsLocally(run, node);

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
