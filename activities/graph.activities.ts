import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import {
  DEFAULT_NODE_TIMEOUT_MS,
  childWorkflowId,
  type BeganExecution,
  type Graph,
  type GraphNode,
  type ItemKey,
  type NodeError,
  type OutputRef,
  type RunGraphInput,
  type RunCloses,
  type RunNodeInput,
  type RunNodeOutput,
} from '../workflows/defs.js';
import type { ExpressionSandbox } from '../src/nodes/expression-sandbox.js';
import { nodeTypes } from '../src/nodes/index.js';
import { firstStepAnswer, type Understands } from '../src/executions/first-step.js';
import { AppError } from '../src/platform/errors.js';
import { claimedAttempt, type Claim, type ExecutionMirror, type ExecutionRef, type NodeEntry } from '../src/executions/execution.mirror.js';
import type { EarlyClaims } from '../src/executions/early-claims.js';
import type { AheadRunner, EarlyRuns } from '../src/executions/early-runs.js';
import { nodesFinishedBefore, readNodeEvents } from '../src/executions/reset-point.js';
import type { ActingUsers } from '../src/auth/acting.js';
import type { Principal } from '../src/auth/auth.service.js';
import { countModelUse, type Metrics } from '../src/platform/metrics.js';
import type { Config } from '../src/config.js';
import type { ConnectionService, ConnectionUse } from '../src/connections/connection.service.js';
import { redactError, type Redact } from '../src/connections/redact.js';
import { itemId, type ExecutionItems } from '../src/executions/execution-items.store.js';
import type { NodeRunContext } from '../src/nodes/node-type.js';
import type { TemporalHandle } from '../src/temporal/connection.js';
import type { WorkflowService } from '../src/workflow-definitions/workflow.service.js';
import type { ErrorWorkflows } from '../src/executions/error-workflow.js';
import { ForgetfulMap, OldestFirstMap } from './caches.js';
import { withHeartbeat } from './heartbeat.js';
import { activityNow, runAhead, type ActivityNow } from './activity-now.js';
import { boundFailure, checkOutputSize, errorOf, forHistory, invalidConfig, jsonBytes, modelUsageOf, toFailure } from './node-outcome.js';
import { patiently } from './patiently.js';
import { evaluateForNode } from './run-values.js';
import { admitScheduledRun, keepScheduledRefusal } from './scheduled-runs.js';
import { CODE } from '../workflows/error-codes.js';

export { toFailure } from './node-outcome.js';

/** How long a node runs before the timeline shows it as running (it is written when it ends anyway). */
const RUNNING_AFTER_MS = 50;

/**
 * Activities of the graph interpreter. They own the execution mirror in PostgreSQL: each node
 * activity writes its own timeline entry, so the mirror is whole even when a worker dies.
 * Executions are found by the Temporal run id, which also covers runs created by a reset.
 */
export interface GraphActivityPorts {
  config: Pick<
    Config,
    | 'SVC_NODE_OUTPUT_LIMIT'
    | 'SVC_LOCAL_PURE_NODES'
    | 'SVC_LOCAL_CALL_MAX_MS'
    | 'SVC_AGENT_PRICES'
    | 'SVC_RUN_WORKFLOW_MAX_DEPTH'
    | 'SVC_RUN_WORKFLOW_MAX_CHILD_RUNS'
    | 'SVC_HISTORY_INLINE_BYTES'
    | 'SVC_NODE_CONTEXT_INLINE_BYTES'
    | 'SVC_RUN_MAX_PARALLEL_NODES'
    | 'SVC_FOR_EACH_MAX_ITEMS'
    | 'SVC_FOR_EACH_MAX_RUN_ITEMS'
    | 'SVC_FOR_EACH_HISTORY_EVENTS'
    | 'SVC_SCHEDULE_MAX_RUNNING_PER_USER'
  >;
  executionMirror: ExecutionMirror;
  /** The items of for_each loops. */
  executionItems: ExecutionItems;
  workflows: Pick<WorkflowService, 'loadVersion' | 'visibleToAll'>;
  connections: Pick<ConnectionService, 'resolve' | 'use'>;
  /** The rights of the people a run acts for. */
  acting: Pick<ActingUsers, 'principal'>;
  records: NodeRunContext<unknown>['records'];
  /** Events an emit_event node sends. */
  events: NodeRunContext<unknown>['events'];
  /** For a run an operator reset: its history says where it came from. */
  temporal: TemporalHandle;
  /** Where `{{ }}` expressions are evaluated, bounded in time and memory, off the event loop. */
  expressions: Pick<ExpressionSandbox, 'resolve'>;
  metrics: Pick<Metrics, 'runsStarted' | 'runsFinished' | 'runDuration' | 'nodeDuration' | 'nodeAttempts' | 'modelTokens' | 'modelCost'>;
  /** Starts the error workflow's run a failed run queued. */
  errorWorkflows: Pick<ErrorWorkflows, 'launch'>;
  /** Claims the API made ahead of runs' first calls (eager starts in this process). */
  earlyClaims: Pick<EarlyClaims<Claim>, 'take'>;
  /** The first attempts of runs' first calls the API ran ahead of their activities (eager starts in this process). */
  earlyRuns: Pick<EarlyRuns<RunNodeInput, RunNodeOutput>, 'take'>;
}

/** The ports and a worker's caches: what every graph activity is a function over. */
export interface GraphWorker {
  ports: GraphActivityPorts;
  /** The records of runs in flight (only they need theirs): a small cache keeps the worker's heap flat. */
  runs: ForgetfulMap<ExecutionRef>;
  /** A stored version of a workflow never changes: runs of it read it from here after the first. */
  versions: OldestFirstMap<{ version: number; graph: Graph }>;
}

/** How a run ended, as the workflow reports it to finishExecution. */
export interface RunResult {
  status: string;
  skipped: { id: string; type: string }[];
  error?: NodeError & { node_id?: string };
  lastOutput?: unknown;
  /** The last output is in the timeline (too large for history). */
  lastOutputRef?: OutputRef;
  cancelled?: { id: string; type: string; startedAt: number }[];
  /** Failures the run handled (on_error continue or branch), with the output `{error}` each became. */
  handled?: { id: string; type: string; output: unknown }[];
}

/** How a node ran in the workflow (a local or pure node), as reported to recordNodeEnd. */
export interface NodeEnd {
  status: 'success' | 'failed';
  output?: unknown;
  error?: NodeError;
  startedAt: number;
  /** A child run's output kept out of history: it goes in `output.output`, read from the child's timeline. */
  outputRef?: OutputRef;
  /** Answer the output by reference when larger than this (workflow code that reads references). */
  inlineBytes?: number;
}

/** Every graph activity, by the name Temporal schedules it under: the run's control steps and its nodes. */
export function graphActivities(services: GraphActivityPorts) {
  const g: GraphWorker = { ports: services, runs: new ForgetfulMap(1_000), versions: new OldestFirstMap(500) };
  const control = {
    beginExecution: (input: RunGraphInput, runId: string, understands: Understands = {}) => beginExecution(g, input, runId, understands),
    finishExecution: (runId: string, result: RunResult) => finishExecution(g, runId, result),
    recordNodeStart: (node: GraphNode, runId: string) => recordNodeStart(g, node, runId),
    recordNodeEnd: (node: GraphNode, runId: string, end: NodeEnd) => recordNodeEnd(g, node, runId, end),
    prepareChildRun: (node: GraphNode, context: RunNodeInput['context'], runId: string, bounds: { inlineBytes?: number } = {}) =>
      prepareChildRun(g, node, context, runId, bounds),
  };
  const nodes = { runNode: (input: RunNodeInput) => runNode(g, input) };
  // A run's first call, run ahead of its local activity by the API that started the run on this
  // process's worker: the same attempt, in a context that stands for the activity's first one.
  const ahead: AheadRunner<RunNodeInput, RunNodeOutput> = (input, run, signal) =>
    runAhead(run, input.node.timeout_ms ?? DEFAULT_NODE_TIMEOUT_MS, signal, () => nodeAttempt(g, input));
  return { control, nodes, ahead, worker: g };
}

/** The Temporal run an activity belongs to (always set for workflow activities). */
export const runOf = () => activityNow().info.workflowExecution!;

async function findExecution(g: GraphWorker, temporalWorkflowId: string, runId: string): Promise<ExecutionRef | undefined> {
  const cached = g.runs.get(runId);
  if (cached) return cached;
  return (await claimExecution(g, temporalWorkflowId, runId))?.ref;
}

/**
 * A run's record as a node's attempt found it: its attempt's number, its connection when the
 * claim read it (null: there is none), and `unbound` when the claim was the API's, made while
 * Temporal answered the start, which writes no run id (see ExecutionMirror.claim).
 */
interface Counted {
  ref: ExecutionRef;
  attempts?: number;
  connection?: ConnectionUse | null;
  unbound?: true;
}

/** Claims the record of a run (see ExecutionMirror.claim), counting `attempt` in the same statement. */
async function claimExecution(
  g: GraphWorker,
  temporalWorkflowId: string,
  runId: string,
  attempt?: { node: GraphNode; startedAt: Date; connectionId?: number },
  /** The same claim, made ahead of the activity by the API that started the run (see EarlyClaims). */
  early?: Promise<Claim | undefined>,
): Promise<Counted | undefined> {
  const fromApi = await early?.catch(() => undefined);
  const claimed = fromApi ?? (await patiently(() => g.ports.executionMirror.claim(temporalWorkflowId, runId, attempt)));
  if (!claimed) return undefined;
  const { attempts, connection, ...ref } = claimed;
  // The API counted the run started with the claim it made.
  if (ref.firstClaim && !fromApi) g.ports.metrics.runsStarted.inc({ trigger: ref.trigger });
  g.runs.set(runId, ref);
  return {
    ref,
    ...(attempts !== undefined ? { attempts } : {}),
    ...(connection !== undefined ? { connection } : {}),
    ...(fromApi ? { unbound: true as const } : {}),
  };
}

/**
 * The record of a run and one more attempt of `node` counted on it before its call is made (a
 * short call run inside the workflow task; see beginAttempt): in one statement when this is the
 * run's first step to claim its record, as a webhook's one node is, which also reads the node's
 * connection (`connection`). `attempts` is unset when the entry may not change (a cancel ended
 * it, a replay carried it over).
 */
async function countedAttempt(g: GraphWorker, node: GraphNode, startedAt: Date): Promise<Counted> {
  const { workflowId, runId } = runOf();
  // Taken first: an attempt counted ahead of this one must not be counted again.
  const early = g.ports.earlyClaims.take(workflowId, runId, node.id);
  const claimed = g.runs.get(runId) && !early ? undefined : await claimExecution(g, workflowId, runId, claimedAttempt(node, startedAt), early);
  if (claimed) return claimed;
  const ref = await currentExecution(g, runId);
  const attempts = await patiently(() => g.ports.executionMirror.beginAttempt(ref.id, node, startedAt));
  return attempts === undefined ? { ref } : { ref, attempts };
}

/**
 * A run nobody prepared a record for, created by a reset in the Temporal Web UI or CLI: its
 * history says which run it came from and why, and the mirror makes it an execution of its own.
 */
async function adoptResetRun(g: GraphWorker, temporalWorkflowId: string, runId: string): Promise<boolean> {
  const { temporal } = g.ports;
  const events = await readNodeEvents(temporal, temporalWorkflowId, runId, { untilReset: true });
  if (!events.reset) return false;
  const { baseRunId, reason, lastKeptEventId } = events.reset;
  // The reset run holds the base run's events up to the point; what the base run recorded about
  // the point's own task (a timer that fired into it, say) is only in the base run.
  const keptNodes = nodesFinishedBefore(await readNodeEvents(temporal, temporalWorkflowId, baseRunId), lastKeptEventId + 1);
  return patiently(() => g.ports.executionMirror.adoptReset(temporalWorkflowId, runId, { runId: baseRunId, reason, keptNodes }));
}

/** The record of a run: the one the API prepared, or one made for a reset run or a started one. */
async function executionOf(g: GraphWorker, temporalWorkflowId: string, runId: string): Promise<ExecutionRef | undefined> {
  const ref = await findExecution(g, temporalWorkflowId, runId);
  if (ref || !(await adoptResetRun(g, temporalWorkflowId, runId))) return ref;
  return findExecution(g, temporalWorkflowId, runId);
}

/** A stored version of a workflow, from the worker's cache after the first read. */
async function definitionOf(g: GraphWorker, workflowId: number, version: number | undefined): Promise<{ version: number; graph: Graph }> {
  const cached = version === undefined ? undefined : g.versions.get(`${workflowId}:${version}`);
  if (cached) return cached;
  const loaded = await patiently(() => g.ports.workflows.loadVersion(workflowId, version));
  const definition = { version: loaded.version, graph: loaded.graph };
  g.versions.set(`${workflowId}:${loaded.version}`, definition);
  return definition;
}

export async function currentExecution(g: GraphWorker, runId: string): Promise<ExecutionRef> {
  const { workflowId } = runOf();
  const ref = await executionOf(g, workflowId, runId);
  if (!ref) throw ApplicationFailure.retryable(`No execution record for run ${runId} yet`, CODE.execution_not_ready);
  return ref;
}

/**
 * The record of the execution a loop's items belong to, by its id: the items workflow that runs
 * them is a Temporal run of its own, so its activities are told the execution instead.
 */
export async function executionById(g: GraphWorker, executionId: number): Promise<ExecutionRef> {
  const key = `execution:${executionId}`;
  const cached = g.runs.get(key);
  if (cached) return cached;
  const ref = await patiently(() => g.ports.executionMirror.refOf(executionId));
  if (!ref) throw ApplicationFailure.nonRetryable(`Execution ${executionId} does not exist`, CODE.not_found);
  g.runs.set(key, ref);
  return ref;
}

/** The joint principal of a run's people; refused when one of them no longer exists. */
async function actorOf(g: GraphWorker, ref: ExecutionRef): Promise<Principal> {
  const principal = await patiently(() => g.ports.acting.principal(ref.actingUserIds, ref.ownerId));
  if (!principal) throw ApplicationFailure.nonRetryable('A person this run acts for no longer exists', CODE.forbidden);
  return principal;
}

/** One attempt of a node, in the metrics. */
export function countAttempt(
  metrics: Pick<Metrics, 'nodeDuration' | 'nodeAttempts'>,
  type: string,
  outcome: string,
  code: string | undefined,
  ms: number,
): void {
  metrics.nodeDuration.observe({ type, outcome }, ms / 1000);
  metrics.nodeAttempts.inc({ type, outcome, code: outcome === 'success' ? '' : (code ?? 'node_failed') });
}

export function writeNode(g: GraphWorker, executionId: number, node: Pick<GraphNode, 'id' | 'type'>, entry: NodeEntry): Promise<void> {
  return patiently(() => g.ports.executionMirror.writeNode(executionId, node, entry));
}

/** First step of every run: claims or creates the execution record and loads the graph. */
export async function beginExecution(g: GraphWorker, input: RunGraphInput, runId: string, understands: Understands): Promise<BeganExecution> {
  const { workflowId: temporalWorkflowId } = runOf();
  // The record is claimed first: a run that then fails (its definition unreadable through a
  // long database outage) is one the mirror can close, knowing its run id.
  let ref = await executionOf(g, temporalWorkflowId, runId);
  const definition = await definitionOf(g, input.workflowId, input.version);
  if (ref && input.trigger === 'schedule') await keepScheduledRefusal(g.ports, runId);
  if (!ref) {
    // Started by a schedule, a record event or a parent run: nobody prepared a record. A child
    // whose payload was too large for history takes it from its parent's timeline.
    const payload = await startPayload(g, input);
    const record = {
      workflowId: input.workflowId,
      version: definition.version,
      trigger: input.trigger,
      payload,
      temporalWorkflowId,
      runId,
      ...(input.parentExecutionId !== undefined ? { parentExecutionId: input.parentExecutionId } : {}),
    };
    // A schedule's run counts against its owner's limit of such runs in progress (scheduled-runs.ts).
    if (input.trigger === 'schedule') await admitScheduledRun(g.ports, record);
    else await patiently(() => g.ports.executionMirror.insertStarted(record));
    ref = await findExecution(g, temporalWorkflowId, runId);
    if (!ref) throw ApplicationFailure.retryable('execution record not visible yet', CODE.execution_not_ready);
  }
  return firstStepAnswer(g.ports.config, { executionId: ref.id, version: definition.version, graph: definition.graph }, understands);
}

/**
 * The trigger payload of a run nobody prepared a record for: its input's, or, when that was too
 * large for history, the calling node's payload from the parent's timeline, the payload a
 * for_each body's run_workflow node kept with its item, or `{item, index}` of a for_each item.
 */
async function startPayload(g: GraphWorker, input: RunGraphInput): Promise<unknown> {
  const { payloadRef, payloadItem } = input;
  if (payloadItem) return (await patiently(() => g.ports.executionItems.itemPayload(payloadItem))) ?? null;
  if (!payloadRef) return input.payload;
  if (payloadRef.item) {
    const item = payloadRef.item;
    const read = await patiently(() => g.ports.executionItems.read([], [{ item, key: payloadKey(payloadRef.node) }]));
    return read.kept.get(`${itemId(item)}:${payloadKey(payloadRef.node)}`) ?? null;
  }
  return patiently(() => g.ports.executionMirror.nodeInputPayload(payloadRef.execution, payloadRef.node));
}

/** Where a for_each body's run_workflow node keeps a child's payload too large for history, with its item. */
export const payloadKey = (nodeId: string) => `payload:${nodeId}`;

/**
 * Last step of every run: the outcome, the skipped nodes, the ones a cancel interrupted and the
 * failures it handled, written at once; a failed run's error workflow is queued with it and started.
 */
export async function finishExecution(g: GraphWorker, runId: string, result: RunResult): Promise<{ executionId: number }> {
  const mirror = g.ports.executionMirror;
  const ref = await currentExecution(g, runId);
  const ended = await patiently(() => mirror.finish(ref.id, { ...result, runId }));
  if (ended) {
    g.ports.metrics.runsFinished.inc({ status: result.status });
    g.ports.metrics.runDuration.observe({ status: result.status }, ended.seconds);
  }
  // Its record is written with the failure; a start that fails here is sent again by the sweep.
  if (ended?.errorRun) await g.ports.errorWorkflows.launch(ended.errorRun);
  return { executionId: ref.id };
}

/** A node the workflow runs itself (local or pure) began. */
export async function recordNodeStart(g: GraphWorker, node: GraphNode, runId: string): Promise<void> {
  const ref = await currentExecution(g, runId);
  await writeNode(g, ref.id, node, { status: 'running', started_at: new Date(), attempts: 1, input: node.config });
}

/**
 * A node the workflow runs itself (a timer, a child run) ended: its timeline entry and its
 * metrics. Answers, to workflow code that asked with `inlineBytes`, the output's size, or a
 * reference to the entry when the output is too large to go back through history.
 */
export async function recordNodeEnd(g: GraphWorker, node: GraphNode, runId: string, end: NodeEnd): Promise<{ ref?: OutputRef; bytes?: number } | void> {
  const ref = await currentExecution(g, runId);
  const finished = new Date();
  countAttempt(g.ports.metrics, node.type, end.status, end.error?.code, finished.getTime() - end.startedAt);
  let output = end.output;
  if (end.outputRef) {
    const child = end.outputRef;
    const read = await patiently(() => g.ports.executionMirror.readValues(ref.id, [{ execution: child.execution ?? ref.id, node: child.node }], false));
    output = { ...(output as Record<string, unknown>), output: read.outputs.get(`${child.execution ?? ref.id}:${child.node}`) ?? null };
  }
  await writeNode(g, ref.id, node, {
    status: end.status,
    started_at: new Date(end.startedAt),
    finished_at: finished,
    duration_ms: finished.getTime() - end.startedAt,
    attempts: 1,
    // A child node's entry keeps the evaluated input prepareChildRun wrote (its payload may be read by reference).
    input: node.type === 'run_workflow' && end.inlineBytes !== undefined ? undefined : node.config,
    output,
    error: end.error,
  });
  if (end.inlineBytes === undefined || end.status !== 'success') return;
  const bytes = jsonBytes(output);
  return bytes > end.inlineBytes ? { ref: { node: node.id, bytes } } : { bytes };
}

/**
 * Resolves a run_workflow node's payload and checks the child may run: the target must be
 * visible to every person this run acts for (the child then acts for them too), the child
 * must not nest deeper than SVC_RUN_WORKFLOW_MAX_DEPTH, and the tree of runs this one belongs
 * to must not have started SVC_RUN_WORKFLOW_MAX_CHILD_RUNS children already.
 */
export async function prepareChildRun(
  g: GraphWorker,
  node: GraphNode,
  context: RunNodeInput['context'],
  runId: string,
  bounds: { inlineBytes?: number },
): Promise<{ workflowId: number; payload?: unknown; parentExecutionId: number; payloadRef?: { execution: number; node: string } }> {
  const ref = await currentExecution(g, runId);
  await writeNode(g, ref.id, node, { status: 'running', started_at: new Date(), attempts: 1, input: node.config });
  try {
    const config = (await evaluateForNode(g.ports, ref, context, node.config)) as {
      workflow_id: number;
      payload?: unknown;
    };
    const targetId = Number(config.workflow_id);
    await checkChildRun(g, ref, node, config.workflow_id, targetId);
    const payload = config.payload ?? null;
    if (bounds.inlineBytes === undefined) return { workflowId: targetId, payload, parentExecutionId: ref.id };
    // The evaluated input is the node's entry from here on; a payload too large for history is
    // read from it by the child's first step.
    checkOutputSize(payload, g.ports.config.SVC_NODE_OUTPUT_LIMIT);
    await writeNode(g, ref.id, node, { status: 'running', attempts: 1, input: { ...config, payload } });
    return jsonBytes(payload) > bounds.inlineBytes
      ? { workflowId: targetId, parentExecutionId: ref.id, payloadRef: { execution: ref.id, node: node.id } }
      : { workflowId: targetId, payload, parentExecutionId: ref.id };
  } catch (err) {
    const failure = toFailure(err);
    await writeNode(g, ref.id, node, { status: 'failed', finished_at: new Date(), error: errorOf(failure) });
    throw failure;
  }
}

/** The child run's limits and its target's visibility; claims the child's place in the tree's count. */
async function checkChildRun(g: GraphWorker, ref: ExecutionRef, node: GraphNode, named: unknown, targetId: number): Promise<void> {
  await checkChildTarget(g, ref, named, targetId);
  await claimChildRuns(g, ref, [childWorkflowId(runOf().workflowId, node.id)]);
}

/** A child run's depth and its target: visible to every person the run acts for, not archived. */
export async function checkChildTarget(g: GraphWorker, ref: ExecutionRef, named: unknown, targetId: number): Promise<void> {
  const { config: limits, workflows } = g.ports;
  if (ref.depth + 1 > limits.SVC_RUN_WORKFLOW_MAX_DEPTH) {
    throw ApplicationFailure.nonRetryable(
      `The child run would nest deeper than ${limits.SVC_RUN_WORKFLOW_MAX_DEPTH} levels (SVC_RUN_WORKFLOW_MAX_DEPTH)`,
      'child_run_limit',
    );
  }
  const visible = await patiently(() => workflows.visibleToAll(targetId, ref.actingUserIds));
  const target = visible
    ? await patiently(() => workflows.loadVersion(targetId)).catch((err: unknown) => {
        if (err instanceof AppError && err.status === 404) return undefined;
        throw err;
      })
    : undefined;
  if (!target || target.status === 'archived') {
    throw ApplicationFailure.nonRetryable(`Workflow ${named} does not exist, is archived, or is not visible to this run's people`, CODE.not_found);
  }
}

/** Claims child runs' places in the budget of the run's tree, all or none (child_run_limit). */
export async function claimChildRuns(g: GraphWorker, ref: ExecutionRef, childIds: string[]): Promise<void> {
  const limits = g.ports.config;
  const claimed =
    childIds.length === 1
      ? await patiently(() => g.ports.executionMirror.claimChildRun(ref.rootId, childIds[0]!, limits.SVC_RUN_WORKFLOW_MAX_CHILD_RUNS))
      : await patiently(() => g.ports.executionMirror.claimChildRuns(ref.rootId, childIds, limits.SVC_RUN_WORKFLOW_MAX_CHILD_RUNS));
  if (!claimed) {
    throw ApplicationFailure.nonRetryable(
      childIds.length === 1
        ? `The runs of this tree have started ${limits.SVC_RUN_WORKFLOW_MAX_CHILD_RUNS} child runs already (SVC_RUN_WORKFLOW_MAX_CHILD_RUNS)`
        : `${childIds.length} child runs would take the runs of this tree past ${limits.SVC_RUN_WORKFLOW_MAX_CHILD_RUNS} (SVC_RUN_WORKFLOW_MAX_CHILD_RUNS)`,
      'child_run_limit',
    );
  }
}

/** One attempt of a node as runNode tracks it: when it began, its number, and what it resolved so far. */
export interface NodeAttempt {
  ref: ExecutionRef;
  node: GraphNode;
  started: number;
  attempts: number;
  /** The node's configuration after its expressions, once evaluated. */
  input?: unknown;
  /** The type of the node's connection, once resolved (the provider of an llm_prompt's usage). */
  connectionType?: string;
  /** Redacts the credential of the node's connection, once resolved (see withoutCredential). */
  redact?: Redact;
  /** The node's connection as the run's claim read it (null: there is none), used instead of reading it again. */
  connectionRead?: ConnectionUse | null;
}

/**
 * Runs one node: evaluates its expressions, runs the type's implementation, records the result.
 * A run's first call whose attempt the API ran ahead (see EarlyRuns) answers that attempt's outcome.
 */
export async function runNode(g: GraphWorker, input: RunNodeInput): Promise<RunNodeOutput> {
  const activity = Context.current();
  if (!input.item && isLocalCall(activity, input.node)) {
    const { workflowId, runId } = activity.info.workflowExecution!;
    const ahead = await g.ports.earlyRuns.take(workflowId, runId, input.node.id, input, activity.cancellationSignal);
    if (ahead) return ahead.outcome;
  }
  return nodeAttempt(g, input);
}

/** A call run inside the workflow task (a short call, local, not a pure node): counted before it is made (see beginAttempt). */
const isLocalCall = (activity: ActivityNow, node: GraphNode) => activity.info.isLocal && nodeTypes.get(node.type)?.pure !== true;

/** One attempt of a node, in the activity it runs in (see activityNow). */
async function nodeAttempt(g: GraphWorker, input: RunNodeInput): Promise<RunNodeOutput> {
  const { node, context, inlineBytes, item, closes } = input;
  const activity = activityNow();
  if (item) return activity.info.isLocal ? runItemNode(g, input, item) : withHeartbeat(activity, () => runItemNode(g, input, item));
  const call = isLocalCall(activity, node);
  const run = async () => {
    const started = Date.now();
    const counted: Counted = call ? await countedAttempt(g, node, new Date(started)) : { ref: await currentExecution(g, runOf().runId) };
    const { ref } = counted;
    const attempt: NodeAttempt = {
      ref,
      node,
      started,
      attempts: counted.attempts ?? activity.info.attempt,
      ...(counted.connection !== undefined ? { connectionRead: counted.connection } : {}),
    };
    // A pure node run locally ends in moments, a local call shows as running already; any other shows so once it takes a while.
    const shown = showRunningLater(g, attempt, activity.info.isLocal);
    const binding = bindRunLater(g, ref.id, counted.unbound === true);
    try {
      const result = withoutCredential(attempt, await executeNode(g, attempt, context));
      await Promise.all([recordNodeSuccess(g, attempt, result, shown.settle, closes), binding.outcome(closes !== undefined)]);
      const branch = { ...(result.branch !== undefined ? { branch: result.branch } : {}), ...(closes ? { closed: { executionId: ref.id } } : {}) };
      if (inlineBytes === undefined) return { output: result.output, ...branch };
      // Written to the timeline above: a large output goes back to the workflow as a reference to it.
      return result.bytes! > inlineBytes
        ? { ref: { node: node.id, bytes: result.bytes! }, ...branch }
        : { output: result.output, bytes: result.bytes!, ...branch };
    } catch (err) {
      // A call the run's cancel aborted failed because of it, whatever its own error says (a
      // worker's shutdown or a timeout aborts it too: those stay failures, for Temporal to retry).
      const { aborted, reason } = activity.cancellationSignal;
      const cause = aborted && reason instanceof CancelledFailure && reason.message === 'CANCELLED' ? reason : err;
      const [failure] = await Promise.all([
        recordNodeFailure(g, attempt, failureWithoutCredential(attempt, cause), shown.settle, inlineBytes),
        binding.outcome(false),
      ]);
      throw failure;
    } finally {
      shown.stop();
      binding.stop();
    }
  };
  return activity.info.isLocal ? run() : withHeartbeat(activity, run);
}

/**
 * Runs one node of a for_each body for one item: no timeline entry (the item is the record, its
 * result written with others in a batch); an output too large for history is kept with the item
 * and answered by reference; the attempts are answered, and a failure after retries is counted on
 * the item at once.
 */
async function runItemNode(g: GraphWorker, { node, context, inlineBytes }: RunNodeInput, item: ItemKey): Promise<RunNodeOutput> {
  const activity = Context.current();
  const started = Date.now();
  const ref = await executionById(g, item.execution);
  const attempt: NodeAttempt = { ref, node, started, attempts: activity.info.attempt };
  try {
    const result = withoutCredential(attempt, await executeNode(g, attempt, context));
    countAttempt(g.ports.metrics, node.type, 'success', undefined, Date.now() - started);
    const usage = modelUsageOf(node.type, result.output);
    if (usage) countModelUse(g.ports.metrics, attempt.connectionType ?? 'unknown', 'node', usage);
    const answer = { ...(result.branch !== undefined ? { branch: result.branch } : {}), attempts: attempt.attempts };
    const bytes = jsonBytes(result.output);
    if (inlineBytes !== undefined && bytes > inlineBytes) {
      await patiently(() => g.ports.executionItems.keep(item, node.id, result.output ?? null));
      return { ref: { node: node.id, bytes, item }, ...answer };
    }
    return { output: result.output, bytes, ...answer };
  } catch (err) {
    // As any node's failure: its credential redacted, its data bounded, and cut to size for history.
    const failure = boundFailure(toFailure(failureWithoutCredential(attempt, err)), g.ports.config.SVC_NODE_OUTPUT_LIMIT);
    countAttempt(g.ports.metrics, node.type, failure instanceof CancelledFailure ? 'cancelled' : 'failed', errorOf(failure).code, Date.now() - started);
    if (attempt.attempts > 1) await patiently(() => g.ports.executionItems.noteAttempts(item, attempt.attempts)).catch(() => undefined);
    throw inlineBytes === undefined ? failure : forHistory(failure, inlineBytes, false);
  }
}

/**
 * A node's output without its connection's credential, in any form it was sent: a target that
 * echoes its request, or a model that repeats its key, would otherwise put it in the timeline, the
 * run's output and Temporal's history. `failureWithoutCredential` does the same for what it threw.
 */
function withoutCredential(attempt: NodeAttempt, result: RunNodeOutput): RunNodeOutput {
  return attempt.redact ? { ...result, output: attempt.redact(result.output) } : result;
}

function failureWithoutCredential(attempt: NodeAttempt, err: unknown): unknown {
  return attempt.redact ? redactError(err, attempt.redact) : err;
}

/**
 * The run's id for a record the API claimed while Temporal answered the start, which binds none
 * (see ExecutionMirror.claim): written with the attempt's outcome when the call ends within
 * RUNNING_AFTER_MS (in the statement that ends the record when the node ends the run, else beside
 * its entry), or once it has gone on that long, so the record names its run (what an idempotent
 * retry, a reset and the execution view read) within moments either way. A write that fails is
 * not the node's failure: the record's end writes the id too. `outcome(endsRecord)` is what the
 * outcome's write waits for; `stop` cancels a write not yet due.
 */
function bindRunLater(g: GraphWorker, executionId: number, unbound: boolean): { outcome: (endsRecord: boolean) => Promise<unknown>; stop: () => void } {
  if (!unbound) return { outcome: async () => undefined, stop: () => undefined };
  const { runId } = runOf();
  const bind = () => patiently(() => g.ports.executionMirror.setRunId(executionId, runId)).catch(() => undefined);
  let bound: Promise<unknown> | undefined;
  const later = setTimeout(() => (bound = bind()), RUNNING_AFTER_MS);
  return {
    outcome: async (endsRecord) => {
      clearTimeout(later);
      await (bound ?? (endsRecord ? undefined : (bound = bind())));
    },
    stop: () => clearTimeout(later),
  };
}

/**
 * A node is written when it ends; one still going after RUNNING_AFTER_MS shows as running
 * meanwhile (most nodes end sooner, and a write less is a step faster). The attempt count is in
 * both writes, so a side effect is never performed more often than recorded. `settle` waits for
 * that write before the end is written; `stop` cancels it if not yet due.
 */
function showRunningLater(g: GraphWorker, attempt: NodeAttempt, isLocal: boolean): { settle: () => Promise<void>; stop: () => void } {
  const { ref, node, started, attempts } = attempt;
  let shownRunning: Promise<unknown> | undefined;
  const showRunning = isLocal
    ? undefined
    : setTimeout(() => {
        shownRunning = writeNode(g, ref.id, node, { status: 'running', started_at: new Date(started), attempts });
        shownRunning.catch(() => undefined);
      }, RUNNING_AFTER_MS);
  return {
    settle: async () => {
      clearTimeout(showRunning);
      await shownRunning?.catch(() => undefined);
    },
    stop: () => clearTimeout(showRunning),
  };
}

/** Evaluates the node's expressions, checks its configuration, and runs its type's implementation. */
export async function executeNode(g: GraphWorker, attempt: NodeAttempt, context: RunNodeInput['context']): Promise<RunNodeOutput> {
  const { ref, node } = attempt;
  const activity = activityNow();
  const type = nodeTypes.get(node.type);
  if (!type?.run) throw ApplicationFailure.nonRetryable(`Node type ${node.type} cannot run as an activity`, CODE.validation_failed);
  attempt.input = await evaluateForNode(g.ports, ref, context, node.config);
  const parsed = (type.resolvedSchema ?? type.configSchema).safeParse(attempt.input);
  if (!parsed.success) throw invalidConfig(parsed.error.issues);
  const result = await type.run({
    node,
    config: parsed.data,
    records: g.ports.records,
    events: g.ports.events,
    prices: g.ports.config.SVC_AGENT_PRICES,
    execution: ref,
    signal: activity.cancellationSignal,
    connection: () => {
      if (node.connection_id === undefined) throw ApplicationFailure.nonRetryable('The node has no connection_id', CODE.validation_failed);
      const id = node.connection_id;
      // Read with the claim a moment ago (this node's, for the same people): used once, the next call reads it again.
      const read = attempt.connectionRead;
      delete attempt.connectionRead;
      const resolving =
        read !== undefined
          ? Promise.resolve().then(() => g.ports.connections.use(id, read))
          : patiently(() => g.ports.connections.resolve(id, ref.actingUserIds));
      return resolving.then((resolved) => {
        attempt.connectionType = resolved.type;
        attempt.redact = resolved.redact;
        return resolved;
      });
    },
    heartbeat: (details) => activity.heartbeat(details),
    actor: () => actorOf(g, ref),
  });
  return { ...result, bytes: checkOutputSize(result.output, g.ports.config.SVC_NODE_OUTPUT_LIMIT) };
}

/** The node succeeded: its metrics and its timeline entry, with the run's outcome when the node `closes` the run. */
async function recordNodeSuccess(g: GraphWorker, attempt: NodeAttempt, result: RunNodeOutput, settle: () => Promise<void>, closes?: RunCloses): Promise<void> {
  const { ref, node, started } = attempt;
  const finished = Date.now();
  countAttempt(g.ports.metrics, node.type, 'success', undefined, finished - started);
  const usage = modelUsageOf(node.type, result.output);
  if (usage) countModelUse(g.ports.metrics, attempt.connectionType ?? 'unknown', 'node', usage);
  await settle();
  const entry = {
    status: 'success',
    started_at: new Date(started),
    finished_at: new Date(finished),
    duration_ms: finished - started,
    attempts: attempt.attempts,
    input: attempt.input,
    output: result.output ?? null,
  };
  if (!closes) return writeNode(g, ref.id, node, entry);
  const ended = await patiently(() =>
    g.ports.executionMirror.finishWithNode(ref.id, node, entry, { ...closes, lastOutput: entry.output, runId: runOf().runId }),
  );
  if (ended) {
    g.ports.metrics.runsFinished.inc({ status: closes.status });
    g.ports.metrics.runDuration.observe({ status: closes.status }, ended.seconds);
  }
}

/** The node failed or was cancelled: its metrics and its timeline entry. Answers the failure to throw. */
async function recordNodeFailure(
  g: GraphWorker,
  attempt: NodeAttempt,
  err: unknown,
  settle: () => Promise<void>,
  /** Set by workflow code that keeps large values out of history. */
  inlineBytes: number | undefined,
): Promise<Error> {
  const { ref, node, started } = attempt;
  const failure = boundFailure(toFailure(err), g.ports.config.SVC_NODE_OUTPUT_LIMIT);
  const finished = Date.now();
  const status = failure instanceof CancelledFailure ? 'cancelled' : 'failed';
  const error = errorOf(failure);
  countAttempt(g.ports.metrics, node.type, status, error.code, finished - started);
  await settle();
  // A failure the run will handle becomes the node's output `{error}`: kept whole here, so later
  // nodes can read it by reference when its data is too large for history.
  const handled = inlineBytes !== undefined && status === 'failed' && (node.on_error === 'continue' || node.on_error === 'branch');
  const written = writeNode(g, ref.id, node, {
    status,
    started_at: new Date(started),
    finished_at: new Date(finished),
    duration_ms: finished - started,
    attempts: attempt.attempts,
    input: attempt.input,
    error,
    ...(handled ? { output: { error } } : {}),
  });
  if (!handled) {
    await written.catch(() => undefined);
    return inlineBytes === undefined ? failure : forHistory(failure, inlineBytes, false);
  }
  // Only a failure whose `{error}` the timeline holds may go by reference.
  const kept = await written.then(
    () => true,
    () => false,
  );
  return forHistory(failure, inlineBytes, kept);
}
