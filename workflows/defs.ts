/**
 * Shared between the Temporal workflow code, the activities and the API: workflow type names,
 * payload types, signals/queries/updates. Pure types and constants only.
 */

export const RUN_GRAPH_WORKFLOW = 'runGraph';

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
  on_error?: 'fail' | 'continue';
}

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
  trigger: 'manual' | 'webhook' | 'schedule' | 'record' | 'replay' | 'child';
  /** Replay with from_node_id and a payload: outputs of upstream nodes reused, not re-run. */
  seed?: Record<string, unknown>;
  startAt?: string;
  /** Execution being replayed, for the replay_of link. */
  replayOf?: number;
}

export interface BeganExecution {
  executionId: number;
  version: number;
  graph: Graph;
  /** Pure node types are run as local activities (decided by the worker's configuration). */
  localPureNodes: boolean;
  pureTypes: string[];
}

export type NodeStatus = 'success' | 'failed' | 'skipped';
export type ExecutionStatus = 'running' | 'success' | 'failed' | 'partial' | 'cancelled';

export interface NodeError {
  code: string;
  message: string;
}

export interface RunGraphResult {
  executionId: number;
  status: Exclude<ExecutionStatus, 'running'>;
  /** Output of the node that finished last (webhook `respond: "last_node"`). */
  lastOutput?: unknown;
  error?: NodeError & { node_id?: string };
}

export interface RunNodeInput {
  node: GraphNode;
  /** Expression context: trigger payload and outputs of the nodes that ran before. */
  context: { trigger: unknown; nodes: Record<string, unknown> };
}

export interface RunNodeOutput {
  output: unknown;
  /** For branching nodes: the branch taken. */
  branch?: string;
}

/** Error types thrown by node activities as non-retryable ApplicationFailures. */
export const NODE_ERROR_TYPES = [
  'validation_failed',
  'expression_error',
  'connection_missing',
  'http_error',
  'node_failed',
  'output_too_large',
  'timeout',
  'provider_error',
  'provider_auth_failed',
] as const;

/** Activity ids of node activities; replay-from-node finds a node's events by this id. */
export const nodeActivityId = (nodeId: string) => `node:${nodeId}`;

// ---- Chat agent -------------------------------------------------------------------------------

export const AGENT_SESSION_WORKFLOW = 'agentSession';
export const agentSessionWorkflowId = (sessionId: string) => `agent-session-${sessionId}`;

/** Tools with side effects: the turn stops at the gate until the call is approved or rejected. */
export const AGENT_GATED_TOOLS: readonly string[] = ['records_create', 'records_update', 'records_delete', 'workflow_run'];

export interface AgentSessionInput {
  sessionId: string;
  /** Model calls allowed per turn before the turn ends with an explanation. */
  maxModelCalls: number;
  /** Updates handled by one run before it continues as new. */
  updatesPerRun: number;
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
  streamChannel?: string;
}

/** Reasons the session workflow refuses an update before accepting it (update validators). */
export const AGENT_REJECTIONS = ['turn_in_progress', 'gate_pending', 'action_not_pending'] as const;

export interface AgentModelCallInput {
  sessionId: string;
  turnId: string;
  /** Index of this model call within the turn; part of the idempotency key of its stored message. */
  step: number;
  streamChannel?: string;
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
  /** For a gated tool: the decision; a rejection is recorded as the tool's result and nothing runs. */
  decision?: { actionId: string; approved: boolean; note?: string; decidedBy: number };
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
