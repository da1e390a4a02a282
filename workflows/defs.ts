/**
 * Shared between the Temporal workflow code, the activities and the API: workflow type names,
 * payload types, signals/queries/updates. Pure types and constants only.
 */

import type { ErrorCode } from './error-codes.js';

export const RUN_GRAPH_WORKFLOW = 'runGraph';

/**
 * The encoding the worker's codec gives a payload the service did not produce (not its
 * ciphertext), its bytes dropped; the workflows refuse what carries it (workflows/trust.ts).
 */
export const UNTRUSTED_ENCODING = 'binary/untrusted';

export interface NodeRetry {
  max_attempts?: number;
  initial_interval_ms?: number;
  backoff_coefficient?: number;
  max_interval_ms?: number;
}

export interface GraphNode {
  id: string;
  type: string;
  name?: string;
  connection_id?: number;
  config: Record<string, unknown>;
  retry?: NodeRetry;
  timeout_ms?: number;
  /**
   * After its retries are spent, a failure stops the run (`fail`), becomes the node's output
   * `{error}` and the run goes on, ending partial (`continue`), or becomes its output `{error}` and
   * takes only its edges with branch `error` (`branch`).
   */
  on_error?: 'fail' | 'continue' | 'branch';
}

/** The branch of the edges a node with on_error "branch" hands its failure to. */
export const ERROR_BRANCH = 'error';

export interface GraphEdge {
  from: string;
  to: string;
  /** For condition (`true`/`false`) and switch (a case value or `default`) sources. */
  branch?: string;
}

export interface Graph {
  nodes: GraphNode[];
  edges: GraphEdge[];
}

/** Arguments of one run. The graph itself is loaded by the first activity, so schedules stay short. */
export interface RunGraphInput {
  workflowId: number;
  /** Definition version to run; the current one when absent (schedule and record triggers). */
  version?: number;
  payload: unknown;
  /** `error`: the run handles the failure of a run of a workflow that names this one as its error workflow. */
  trigger: 'manual' | 'webhook' | 'schedule' | 'record' | 'replay' | 'child' | 'error';
  /**
   * A run_workflow child whose payload is too large for history: the payload is the `payload` of
   * the calling node's evaluated input in the parent's timeline (`payload` is then null).
   */
  payloadRef?: { execution: number; node: string; item?: ItemKey };
  /** The payload was too large for history: it is the trigger payload of the run's prepared record (`payload` is then null). */
  payloadInRecord?: true;
  /** Replay from a node: the outputs of the nodes it reuses (they do not run again). */
  seed?: Record<string, unknown>;
  /**
   * Reused outputs too large to travel in the run's input: each is read from the new execution's
   * own timeline (the replay copies the entries there), and counts as finished on `branch`.
   */
  seedRefs?: Record<string, { branch?: string }>;
  /**
   * Seeded nodes whose reused outcome is a failure their node handed to its "error" edges
   * (on_error "branch"): they count as failed into those edges, not as finished.
   */
  seedErrors?: string[];
  startAt?: string;
  /** Execution being replayed, for the replay_of link. */
  replayOf?: number;
  /**
   * The answer of the run's first step, prepared by the API that wrote the run's record (it has
   * the record and the version's graph at hand): the run takes it instead of asking beginExecution,
   * and its record is claimed by its first activity. Taken only when `asked` is what this workflow
   * code asks its first step (PREPARED_FIRST_STEP); otherwise the run asks as before.
   */
  firstStep?: { asked: number; answer: BeganExecution };
  /** A run_workflow child: the execution of the run that started it (its place in the tree, its people). */
  parentExecutionId?: number;
  /**
   * A for_each item's child run whose item is too large for history: the payload is `{item, index}`
   * of that item, read from the loop's items (`payload` is then null).
   */
  payloadItem?: ItemKey;
  /**
   * A replay of a loop's failed items: the for_each node `node` (and every loop inside its body)
   * reuses the results of the items that succeeded in `execution` and runs only the others.
   */
  itemsFrom?: { execution: number; node: string };
}

/** The Temporal workflow id of the child run a run_workflow node starts (reset points find children by it). */
export const childWorkflowId = (parentWorkflowId: string, nodeId: string) => `${parentWorkflowId}-${nodeId}`;

/**
 * How the interpreter runs a node of a type, as the node registry says: an activity, a local
 * activity (pure and fast: no dispatch through the server), a durable timer (config
 * `duration_ms`), a child run of another stored workflow, a wait for an event (a signal raced
 * against a timer, `wait`), an approval on the gate (a decision raced against its deadline,
 * `approval`), or a loop over items (for_each: its items run in child workflows of their own,
 * see FOR_EACH_WORKFLOW).
 */
export type NodeRunMode = 'activity' | 'local' | 'timer' | 'child' | 'wait' | 'approval' | 'loop';

export interface BeganExecution {
  executionId: number;
  version: number;
  graph: Graph;
  /** Node type -> how it runs (the worker's registry and configuration decide). */
  runModes?: Record<string, NodeRunMode>;
  /** Earlier workflow code reads these instead: pure types run locally when this is set. */
  localPureNodes?: boolean;
  pureTypes?: string[];
  /**
   * How the run marks its nodes in its history (LEAN_HISTORY: only where Temporal's own events do
   * not say it). Absent in answers recorded before it existed: those runs keep writing a memo for
   * every node's start and finish, behind the `node-finished-memo` patch.
   */
  history?: typeof LEAN_HISTORY;
  /**
   * Node types with side effects that run as local activities when short: a node of one of
   * `types` whose timeout (`timeout_ms`, else DEFAULT_NODE_TIMEOUT_MS) is at most `maxTimeoutMs`
   * (SHORT_LOCAL_NODES). Absent in answers to workflow code that did not ask for it: those runs
   * run such nodes as regular activities, as they always did.
   */
  shortLocal?: ShortLocalNodes;
  /**
   * The node that ends the run (the last to run) is told so (RunNodeInput.closes) and, when it
   * succeeds, writes the run's outcome with its own entry: the run then ends without a step of
   * its own (CLOSE_IN_NODE). Absent in answers to workflow code that did not ask for it.
   */
  closeInNode?: true;
  /**
   * In a lean run, a node run as a local activity is marked by one memo, upserted in the workflow
   * task that sees it end and naming both its start and its end (LOCAL_MARKED_AT_END): it started
   * in that task, or it ran across tasks and a reset to that task runs it again all the same.
   * Absent in answers to workflow code that did not ask: those runs upsert one memo at its start
   * and one at its end.
   */
  localMarkedAtEnd?: true;
  /**
   * The bounds that keep every workflow task of the run under Temporal's limits (REFS_HISTORY).
   * Absent in answers to workflow code that did not ask for them: those runs pass every value
   * inline and start every ready node at once, as they always did.
   */
  bounds?: RunBounds;
}

/**
 * How a run keeps each workflow task under Temporal's limits (4 MiB a message) whatever its
 * payload and node outputs: a value larger than `inlineBytes` never travels in history (the
 * activity that made it keeps it in the execution's timeline and answers a reference); a node's
 * inline context is at most `contextBytes` (the rest goes by reference); at most `maxRunning` of
 * the run's nodes are in flight at once. What one task carries is then bounded by
 * maxRunning x (contextBytes + inlineBytes) plus the node definitions, whatever the run does.
 */
export interface RunBounds {
  inlineBytes: number;
  contextBytes: number;
  maxRunning: number;
}

/**
 * The second detail of a node failure whose data was too large for history: the activity kept the
 * whole `{error}` as the node's output in the timeline, and the first detail is a cut copy.
 */
export interface FailureKept {
  kept_in_timeline: true;
}

/** What workflow code asks of beginExecution: it reads bounds and passes large values by reference. */
export const REFS_HISTORY = 1;

/** What workflow code asks of beginExecution: it runs short calls of `shortLocal`'s types as local activities. */
export const SHORT_LOCAL_NODES = 1;

/** What workflow code asks of beginExecution: the node that ends the run writes the run's outcome (closeInNode). */
export const CLOSE_IN_NODE = 1;

/** What workflow code asks of beginExecution: one memo marks a local node, when it ends (localMarkedAtEnd). */
export const LOCAL_MARKED_AT_END = 1;

/** See BeganExecution.shortLocal. */
export interface ShortLocalNodes {
  types: string[];
  maxTimeoutMs: number;
}

/** A node's timeout when its definition sets none. */
export const DEFAULT_NODE_TIMEOUT_MS = 30_000;

/**
 * A node output kept out of Temporal's history: the timeline entry of `node` in `execution` (the
 * current run's own execution when absent) holds the value. Only activities create references,
 * and they travel beside values, never inside them, so no value a user's expression builds can
 * pose as one.
 */
export interface OutputRef {
  node: string;
  execution?: number;
  /** JSON size of the value referred to. */
  bytes: number;
  /** The output of a node of a for_each body: kept with that item (its `refs`), not in the timeline. */
  item?: ItemKey;
}

/**
 * A run begun with this answer writes no memo for a node that runs as a regular activity (its
 * ActivityTaskScheduled event, with activity id `node:<id>`, marks the task that started it, and
 * its completion, failure, time-out or cancel marks its end) and no `patched()` marker: its
 * history is read as exact. Timers, local activities and child runs still get their memos.
 * The workflow asks for it and its first step's answer grants it; the answer is in the history,
 * so a run begun on earlier code (which asked for nothing) replays as it was written.
 */
export const LEAN_HISTORY = 2;

/** What the graph workflow asks its first step (beginExecution) for: see LEAN_HISTORY, REFS_HISTORY, SHORT_LOCAL_NODES, CLOSE_IN_NODE, LOCAL_MARKED_AT_END. */
export const FIRST_STEP_ASKS = {
  history: LEAN_HISTORY,
  refs: REFS_HISTORY,
  local: SHORT_LOCAL_NODES,
  close: CLOSE_IN_NODE,
  marks: LOCAL_MARKED_AT_END,
} as const;

/**
 * Names FIRST_STEP_ASKS in a prepared first step (RunGraphInput.firstStep): a new ask is a new
 * number, so workflow code never takes an answer prepared for other asks than its own.
 */
export const PREPARED_FIRST_STEP = 1;

/**
 * How a run runs one node: its type's mode, except that a short call of a `shortLocal` type runs
 * as a local activity in runs whose first step granted it.
 */
export function nodeModeOf(began: BeganExecution, node: Pick<GraphNode, 'type' | 'timeout_ms'>): NodeRunMode {
  const mode = runModeOf(began, node.type);
  const short = began.shortLocal;
  if (mode !== 'activity' || !short?.types.includes(node.type)) return mode;
  return (node.timeout_ms ?? DEFAULT_NODE_TIMEOUT_MS) <= short.maxTimeoutMs ? 'local' : mode;
}

/**
 * Whether a node is a short call: a side effect run as a local activity (not a pure node run
 * locally). The run starts one as a local activity only when no other is in flight (startCall).
 */
export function isShortCall(began: BeganExecution, node: Pick<GraphNode, 'type' | 'timeout_ms'>): boolean {
  return nodeModeOf(began, node) === 'local' && runModeOf(began, node.type) !== 'local';
}

/**
 * The node a new run's first workflow task starts as a local call, when that is certain before
 * the run begins: its graph has one node that no edge leads to, and that node is a short call (a
 * run starts the first call it reaches locally). Nothing else: several roots start in an order
 * and under limits the API would have to repeat.
 */
export function firstCallOf(began: BeganExecution): GraphNode | undefined {
  const led = new Set(began.graph.edges.map((e) => e.to));
  const roots = began.graph.nodes.filter((n) => !led.has(n.id));
  return roots.length === 1 && isShortCall(began, roots[0]!) ? roots[0] : undefined;
}

/** A run mode for a node type, also for runs begun before runModes existed (their recorded answer). */
export function runModeOf(began: BeganExecution, type: string): NodeRunMode {
  const mode = began.runModes?.[type];
  if (mode) return mode;
  if (type === 'delay') return 'timer';
  if (type === 'run_workflow') return 'child';
  if (type === 'for_each') return 'loop';
  return began.localPureNodes && (began.pureTypes ?? []).includes(type) ? 'local' : 'activity';
}

export type NodeStatus = 'success' | 'failed' | 'skipped' | 'cancelled';
export type ExecutionStatus = 'running' | 'success' | 'failed' | 'partial' | 'cancelled';

export interface NodeError {
  code: string;
  message: string;
  /** What the failure carries besides its message: an http_error's `{status, body}` of the answer. */
  data?: unknown;
}

export interface RunGraphResult {
  executionId: number;
  status: Exclude<ExecutionStatus, 'running'>;
  /** Output of the node that finished last (webhook `respond: "last_node"`). */
  lastOutput?: unknown;
  /** Instead of lastOutput when that output is too large for history: read it from the execution record. */
  lastOutputRef?: OutputRef;
  error?: NodeError & { node_id?: string };
}

export interface RunNodeInput {
  node: GraphNode;
  /** Expression context: trigger payload and outputs of the nodes that ran before. */
  context: NodeContext;
  /** Answer an output larger than this many bytes of JSON by reference (workflow code that reads references sets it). */
  inlineBytes?: number;
  /** The run ends with this node: when it succeeds, its activity writes the run's outcome too (see BeganExecution.closeInNode). */
  closes?: RunCloses;
  /**
   * The node is one of a for_each body, run for this item: it has no timeline entry of its own
   * (the item is the record), and an output too large for history is kept with the item.
   */
  item?: ItemKey;
}

/** The outcome of a run that ends with a node's success: what its finish would write, the last output being the node's. */
export interface RunCloses {
  status: 'success' | 'partial';
  skipped: { id: string; type: string }[];
  handled?: { id: string; type: string; output: unknown }[];
}

/**
 * What a node's expressions see, as the workflow passes it: values inline, and under `refs` the
 * ones kept out of history (the trigger payload of this run's execution, outputs by reference),
 * which the activity reads from PostgreSQL before it evaluates anything.
 */
export interface NodeContext {
  trigger: unknown;
  nodes: Record<string, unknown>;
  /** Inside a for_each body: the item and its index (`refs.item`: the item is read from the loop's items). */
  item?: unknown;
  index?: number;
  refs?: { trigger?: true; nodes?: Record<string, OutputRef>; item?: ItemKey };
}

export interface RunNodeOutput {
  /** Absent when `ref` is set. */
  output?: unknown;
  /** For branching nodes: the branch taken. */
  branch?: string;
  /** The output is in the timeline, too large for history (only when the input asked with inlineBytes). */
  ref?: OutputRef;
  /** JSON size of the output, when the activity measured it. */
  bytes?: number;
  /** The activity wrote the run's outcome with the node's entry (it was told the node `closes` the run). */
  closed?: { executionId: number };
  /** Attempts the node took (a for_each body's node: the item records the most of its nodes'). */
  attempts?: number;
  /** The node succeeded with failures it recorded and went on from (a loop whose items failed with on_item_error "continue"): the run ends `partial`. */
  partial?: boolean;
}

/**
 * The codes a node activity ends with, and whether each is retried, are in the catalogue of error
 * codes (`retried`, workflows/error-codes.ts); `NODE_REFUSALS` (the refusals among them) are the
 * `nonRetryableErrorTypes` of every node activity.
 */
export { NODE_REFUSALS, type NodeErrorCode } from './error-codes.js';

/** Memo key the workflow upserts when a node starts (the reset point of a replay from that node). */
export const NODE_STARTED_MEMO = 'node';
/** Memo key upserted with a node's start in a lean run (LEAN_HISTORY): its history is exact. */
export const NODE_HISTORY_MEMO = 'history';
/** Memo key upserted when a node finishes, so a reset knows what finished before it. */
export const NODE_FINISHED_MEMO = 'finished';
export interface NodeFinishedMemo {
  node: string;
  /** It ran as a local activity: its result belongs to the workflow task that saw it finish. */
  local: boolean;
}

/**
 * patched() id: the run takes the first step its input carries (RunGraphInput.firstStep) instead
 * of asking beginExecution. A run a worker on earlier code began asked, though its input carries
 * one (an API on this code started it during a rolling deployment): its history has no marker.
 */
export const PREPARED_FIRST_STEP_PATCH = 'prepared-first-step';

/** patched() id of the finished-memo; runs started before it carry none. */
export const NODE_FINISHED_MEMO_PATCH = 'node-finished-memo';

/**
 * patched() id: a failure of a node with on_error "branch" takes its "error" edges (and a replay
 * seeds such a failure so), instead of failing the run. Only runs of graphs that use it reach it.
 */
export const ERROR_BRANCH_PATCH = 'error-branch';

/** Activity ids of node activities; replay-from-node finds a node's events by this id. */
export const nodeActivityId = (nodeId: string) => `node:${nodeId}`;

// ---- Loops over items (for_each) ------------------------------------------------------------

/**
 * The Temporal workflow type that runs a for_each node's items: a child of the run (or of the
 * outer loop's items, for a loop inside a body), which runs them `concurrency` at a time, a page
 * at a time, records their results in batches and continues as new before its history nears
 * Temporal's limits. The items themselves are rows of the execution's item table, never a list in
 * history.
 */
export const FOR_EACH_WORKFLOW = 'forEachItems';

/** The items of one loop run: a for_each node of an execution, inside the outer items `scope` (their indexes, outermost first; [] for a loop of the graph). */
export interface LoopKey {
  execution: number;
  node: string;
  scope: number[];
}

/** One item of a loop run. */
export interface ItemKey extends LoopKey {
  index: number;
}

/** A for_each node's configuration as stored (strings may still hold `{{ }}`). */
export interface ForEachConfig {
  items: unknown;
  body?: { nodes: GraphNode[]; edges: GraphEdge[]; output_node?: string };
  workflow_id?: number;
  concurrency?: number;
  on_item_error?: 'fail' | 'continue';
}

/** What the first step of a loop answers: its items are listed, and how many still have to run. */
export interface BegunLoop {
  loop: LoopKey;
  /** A `workflow_id` body: the workflow each item runs, checked visible to the run's people. */
  workflowId?: number;
  total: number;
  /** Items without a result to reuse: the ones the items workflow runs. */
  pending: number;
  /** How long the items workflow's history may grow before it continues as new (SVC_FOR_EACH_HISTORY_EVENTS). */
  historyEvents?: number;
}

/** How a loop's items ended, as its items workflow reports it to the loop's last step. */
export interface LoopOutcome {
  /** With on_item_error "fail": the first item that failed (no item started after it). */
  failure?: ItemFailure;
  /** An item failed with on_item_error "continue", or an item's body went on from a failure. */
  partial: boolean;
}

export interface ItemFailure extends NodeError {
  index: number;
}

/** An item's result as the items workflow reports it to be recorded. */
export interface ItemResult {
  index: number;
  status: 'success' | 'failed';
  /** The output, inline (absent when `kept` or `child` says where it is, or when the body's output node was skipped). */
  output?: unknown;
  /** The output is that body node's, kept with the item (too large for history). */
  kept?: string;
  /** The output is the last output of this child execution (a `workflow_id` body). */
  child?: number;
  /** Why it failed; `node_id` names the body node that failed. */
  error?: NodeError & { node_id?: string };
  attempts: number;
  /** Workflow time the item started, ms since the epoch, and how long it took. */
  startedAt: number;
  durationMs: number;
}

/** A batch of items of a body of pure nodes only, run in one local activity (see runPureItems). */
export interface PureItems {
  loop: LoopKey;
  /** The for_each node, its body included. */
  node: GraphNode;
  items: { index: number; item?: unknown }[];
  /** What the body sees from outside the loop. */
  context: NodeContext;
}

/** How a batch of pure items went; their results are recorded by the activity itself. */
export interface PureOutcome {
  /** The first item that failed, in index order. */
  failure?: ItemFailure;
  failed: number;
  /** An item's body went on from a failure it handled (on_error "continue"). */
  partial: boolean;
}

/** Arguments of one run of a loop's items workflow (and of each run it continues as). */
export interface ForEachInput {
  loop: LoopKey;
  /** The for_each node, its body included. */
  node: GraphNode;
  /** What the body sees from outside the loop: the trigger payload and the outer nodes it names, inline or by reference. */
  context: NodeContext;
  runModes: Record<string, NodeRunMode>;
  /** The run's bounds; the items workflow divides them among the items in flight. */
  bounds: RunBounds;
  /** The body is another workflow: its id (checked visible to the run's people when the loop began). */
  workflowId?: number;
  /** A replay of failed items: loops inside the body reuse the items that succeeded in this execution. */
  reuseFrom?: number;
  /** The history budget of each of its runs (FOR_EACH_HISTORY_EVENTS when absent). */
  historyEvents?: number;
  /** Carried from the runs before this one (continue-as-new): the last index started, how it went. */
  after?: number;
  outcome?: LoopOutcome;
}

/** Temporal workflow id of a loop's items workflow: under its parent's id, with a separator node ids cannot hold. */
export const forEachWorkflowId = (parentWorkflowId: string, nodeId: string, index?: number) =>
  index === undefined ? `${parentWorkflowId}/${nodeId}` : `${parentWorkflowId}/${index}/${nodeId}`;

/** Temporal workflow id of the child run a body's run_workflow node starts for one item (the items workflow starts it, its activity claims it). */
export const itemChildWorkflowId = (itemsWorkflowId: string, index: number, nodeId: string) => `${itemsWorkflowId}/${index}/${nodeId}`;

/** Temporal workflow id of the child run a `workflow_id` body starts for one item. */
export const itemRunWorkflowId = (itemsWorkflowId: string, index: number) => `${itemsWorkflowId}/${index}`;

/**
 * A loop's items workflow continues as new once its history has this many events (unless
 * SVC_FOR_EACH_HISTORY_EVENTS says otherwise), or earlier when Temporal suggests it; it stops
 * starting items early enough that the ones in flight end before then. Temporal warns at 10,240
 * events and stops a run at 51,200.
 */
export const FOR_EACH_HISTORY_EVENTS = 8_000;

// ---- Chat agent -------------------------------------------------------------------------------

export const AGENT_SESSION_WORKFLOW = 'agentSession';
export const agentSessionWorkflowId = (sessionId: string) => `agent-session-${sessionId}`;

/**
 * Tools with side effects: the turn stops at the gate until the call is approved, rejected or
 * expires. The one declaration of which tools are gated: the workflow reads it here (it may not
 * import src/), the tool registry in src/agent/agent.tools.ts derives each tool's `gated` from it
 * and the tool activity refuses to run one of these without an approved action.
 */
export const AGENT_GATED_TOOLS = ['records_create', 'records_update', 'records_delete', 'workflow_run'] as const;
export type AgentGatedTool = (typeof AGENT_GATED_TOOLS)[number];
export const isGatedTool = (name: string): name is AgentGatedTool => (AGENT_GATED_TOOLS as readonly string[]).includes(name);

/**
 * patched() id of the gate's expiry: a gate opened before it (a history without the marker) has no
 * deadline and no timer, as before; every gate opened after it gets both.
 */
export const AGENT_GATE_EXPIRY_PATCH = 'agent-gate-expiry';
/** patched() id: a turn's begin and finish bookkeeping as local activities. */
export const AGENT_LOCAL_BOOKKEEPING_PATCH = 'agent-local-bookkeeping';
/** patched() id: a decision that reached the workflow without being stored reopens its gate. */
export const AGENT_DECISION_NOT_STORED_PATCH = 'agent-decision-not-stored';
/** patched() id: an expiry that could not be stored is tried again a minute later. */
export const AGENT_EXPIRY_RETRY_PATCH = 'agent-expiry-retry';

/**
 * patched() id: a message turn's first model call stores the user's message itself (no step
 * before it), and a turn that ends with the model's answer needs no closing step.
 */
export const AGENT_LEAN_TURN_PATCH = 'agent-lean-turn';

/** Who may decide a session's pending actions (chosen when the session is created). */
export const AGENT_APPROVAL_POLICIES = ['owner', 'others', 'any'] as const;
export type AgentApprovalPolicy = (typeof AGENT_APPROVAL_POLICIES)[number];

/** States of a gated action (an agent's, or a workflow's approval); only `pending` ever changes, once. `cancelled`: the run that asked was cancelled. */
export const AGENT_ACTION_STATUSES = ['pending', 'approved', 'rejected', 'expired', 'cancelled'] as const;
export type AgentActionStatus = (typeof AGENT_ACTION_STATUSES)[number];

export interface AgentSessionInput {
  sessionId: string;
  /** Model calls allowed per turn before the turn ends with an explanation. */
  maxModelCalls: number;
  /** Updates handled by one run before it continues as new. */
  updatesPerRun: number;
  /** Wait before an expiry that could not be stored is tried again (default a minute). */
  expiryRetryMs?: number;
}

export interface AgentToolCall {
  id: string;
  name: string;
  args: Record<string, unknown>;
}

export interface AgentTelemetry {
  tokens_in: number;
  tokens_out: number;
  wall_ms: number;
  cost_usd: number;
}

export interface AgentToolCalled {
  name: string;
  args: Record<string, unknown>;
  result_summary: string;
}

export interface AgentPendingAction {
  action_id: string;
  tool: string;
  args: Record<string, unknown>;
  summary: string;
  /** When the action expires unless decided; absent for actions opened without expiry. */
  expires_at?: string | null;
}

/** What the gate activity answers: the pending action, and how long it may wait when it expires. */
export interface AgentOpenedGate extends AgentPendingAction {
  /** Milliseconds until expiry (the workflow's timer); absent when the gate was opened without expiry. */
  ttl_ms?: number;
}

/** A decision as the session workflow passes it to the tool activity. */
export interface AgentDecision {
  actionId: string;
  approved: boolean;
  /** The action expired undecided (then `approved` is false and nobody decided it). */
  expired?: boolean;
  note?: string;
  /** Absent for an expiry. */
  decidedBy?: number;
  /** Arguments the approver replaced the model's with (validated by the API). */
  editedArgs?: Record<string, unknown>;
}

/** What a message, an approval or a rejection answers: the turn's next outcome. */
export type AgentTurnOutcome =
  | { outcome: 'answered'; assistant_message: string; tools_called: AgentToolCalled[]; telemetry: AgentTelemetry }
  | { outcome: 'gate_pending'; pending_action: AgentPendingAction; tools_called: AgentToolCalled[]; telemetry: AgentTelemetry }
  | { outcome: 'failed'; error: { code: string; message: string }; tools_called: AgentToolCalled[]; telemetry: AgentTelemetry };

export interface AgentMessageArgs {
  turnId: string;
  content: string;
  /** LISTEN/NOTIFY channel the API streams from; absent when the caller did not ask for a stream. */
  streamChannel?: string;
}

export interface AgentDecisionArgs {
  actionId: string;
  approved: boolean;
  note?: string;
  decidedBy: number;
  /** Approve only: the arguments the tool runs with instead of the model's. */
  editedArgs?: Record<string, unknown>;
  streamChannel?: string;
}

/**
 * Reasons the session workflow refuses an update before accepting it (update validators), and
 * the API's 409 codes for them (`action_not_pending` is answered as `action_already_decided`).
 */
export const AGENT_REJECTION = {
  turnInProgress: 'turn_in_progress',
  gatePending: 'gate_pending',
  actionNotPending: 'action_not_pending',
  actionExpired: 'action_expired',
} as const satisfies Record<string, ErrorCode>;
export type AgentRejection = (typeof AGENT_REJECTION)[keyof typeof AGENT_REJECTION];
export const AGENT_REJECTIONS: readonly AgentRejection[] = Object.values(AGENT_REJECTION);

/** Failure type of the tool activity when asked to run a gated tool without a matching approved action. */
export const AGENT_ACTION_NOT_APPROVED = 'action_not_approved' satisfies ErrorCode;

export interface AgentModelCallInput {
  sessionId: string;
  turnId: string;
  /** Index of this model call within the turn; part of the idempotency key of its stored message. */
  step: number;
  streamChannel?: string;
  /** The first call of a message turn: the user's message, stored before the conversation is read. */
  userMessage?: string;
  /**
   * Set for a message turn whose caller waits for its outcome without a stream: when this call's
   * answer ends the turn (no tool calls), the activity announces the turn's outcome once the
   * answer is stored, from the turn so far (its tools called, its telemetry before this call, and
   * when it began, in workflow time), so the caller can answer before the workflow's next task.
   */
  announce?: { toolsCalled: AgentToolCalled[]; telemetry: AgentTelemetry; startedAt: number };
}

export interface AgentModelCallResult {
  text: string;
  toolCalls: AgentToolCall[];
  tokensIn: number;
  tokensOut: number;
  costUsd: number;
}

export interface AgentToolRunInput {
  sessionId: string;
  turnId: string;
  stepKey: string;
  call: AgentToolCall;
  /**
   * For a gated tool: the decision; a rejection or an expiry is recorded as the tool's result and
   * nothing runs. The activity checks it against the stored action before it runs anything.
   */
  decision?: AgentDecision;
  streamChannel?: string;
}

export interface AgentTurnEnd {
  sessionId: string;
  turnId: string;
  /** Model calls made so far in the turn (part of the idempotency key). */
  step: number;
  telemetry: AgentTelemetry;
  /** An assistant message the workflow itself adds (the model-call limit was reached). */
  closingMessage?: string;
  error?: { code: string; message: string };
}

// ---- Licence webhooks -------------------------------------------------------------------------

export const LICENSE_WEBHOOK_WORKFLOW = 'deliverLicenseWebhook';

/** One delivery of a licence event to one vendor webhook; its retry policy comes from the configuration. */
export interface LicenseWebhookInput {
  deliveryId: string;
  /** Attempts before the delivery is recorded as failed. */
  maxAttempts: number;
  /** Wait before the second attempt; each further wait doubles. */
  retryMs: number;
  /** How long one request may take. */
  timeoutMs: number;
}

export interface LicenseWebhookResult {
  deliveryId: string;
  status: 'delivered' | 'failed';
  attempts: number;
}

/** Non-retryable failure types of the send activity: retrying cannot help. */
export const LICENSE_WEBHOOK_FINAL_ERRORS = ['not_found', 'webhook_inactive'] as const satisfies readonly ErrorCode[];

// ---- Waiting inside a run: events and approvals -------------------------------------------------

/** An event as a `wait_for_event` node received it: its output is `{event: ReceivedEvent}`. */
export interface ReceivedEvent {
  name: string;
  key: string;
  data: unknown;
  /** When it was sent (before the wait began, for an event taken from the lookback window). */
  sent_at: string;
  /** When the wait took it. */
  received_at: string;
}

/** A wait's first step: the wait is registered, or it took an event sent within its lookback window. */
export interface RegisteredWait {
  waitId: string;
  timeoutMs: number;
  event?: ReceivedEvent;
}

/** How a wait ended, as the workflow saw it; the step that records it answers the node's outcome. */
export interface WaitEnd {
  node: GraphNode;
  runId: string;
  waitId: string;
  /** Delivered by a signal; absent when the timer fired first. */
  event?: ReceivedEvent;
  startedAt: number;
  /** Answer the output by reference when larger (workflow code that keeps large values out of history). */
  inlineBytes?: number;
}

/** An approval node's pending action, as its first step opened it. */
export interface OpenedApproval {
  actionId: string;
  /** Milliseconds until the action expires. */
  ttlMs: number;
  /** Where the node posts the approvers' links when the action opens, reminds and escalates (the path evaluated). */
  notify?: { connectionId: number; path: string };
  remindEveryMs?: number;
  /** Reminders sent at most (they stop after that; the action still waits for its deadline). */
  maxReminders: number;
  escalateAfterMs?: number;
  /** The approvers an escalation adds (logins resolved when the action opened). */
  escalateTo?: { userIds: number[]; capabilities: string[] };
}

/** Why approvers are notified: the action opened, a reminder, or an escalation (only the approvers it added). */
export type ApprovalNotice = 'requested' | 'reminder' | 'escalated';

/** One approver's decision, as an approval node's output lists it. */
export interface ApproverDecision {
  login: string;
  decision: 'approved' | 'rejected';
  note: string | null;
  at: string;
}

/** An approval node's output; `branch` (the same as `decision`) lets a seeded replay take its edge. */
export interface ApprovalOutcome {
  decision: 'approved' | 'rejected' | 'expired';
  fields: Record<string, unknown>;
  decided_by: ApproverDecision[];
  branch: 'approved' | 'rejected' | 'expired';
}

/** Wake-up of a wait: the event endpoint (or an emit_event node) delivered an event to it. */
export interface EventDelivery {
  waitId: string;
  event: ReceivedEvent;
}

/** Wake-up of an approval: its action reached a final decision (the stored action says which). */
export interface ApprovalDecided {
  actionId: string;
}
