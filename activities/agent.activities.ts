import { ApplicationFailure, Context } from '@temporalio/activity';
import { costOf } from '../src/providers/pricing.js';
import { countModelUse, type Metrics } from '../src/platform/metrics.js';
import { inSpan } from '../src/platform/tracing.js';
import { insertMessage, loadHistory, loadSession, ownerOf, stepMessage, type ActionRow, type SessionRow } from '../src/agent/agent.store.js';
import type { AgentActionStore } from '../src/agent/agent-action.store.js';
import { publish } from '../src/agent/agent.stream.js';
import { answeredOutcome, turnAnnouncement } from '../src/agent/agent.turns.js';
import { runTool, summarizeCall, toolSpecs } from '../src/agent/agent.tools.js';
import { providerFor, type ChatMessage, type ModelReply } from '../src/providers/index.js';
import { toIso } from '../src/db/sql.js';
import type { AuthService } from '../src/auth/auth.service.js';
import type { UsersService } from '../src/auth/users.service.js';
import type { Config } from '../src/config.js';
import type { ConnectionService } from '../src/connections/connection.service.js';
import { redactError, type Redact } from '../src/connections/redact.js';
import type { Sql } from '../src/db/sql.js';
import type { AgentToolPorts } from '../src/agent/agent.tools.js';
import {
  AGENT_ACTION_NOT_APPROVED,
  AGENT_GATED_TOOLS,
  isGatedTool,
  type AgentActionStatus,
  type AgentModelCallInput,
  type AgentModelCallResult,
  type AgentOpenedGate,
  type AgentToolCall,
  type AgentToolRunInput,
  type AgentTurnEnd,
} from '../workflows/defs.js';
import { checkToolCallCount, connectionError, modelCallFailure, storedModelResult, uniqueToolCallIds } from './agent-model-call.js';
import {
  decisionRecord,
  editorOf,
  expiredEnd,
  gateRefusal,
  noRunnerOutcome,
  outcomeUnknownEnd,
  ranEnd,
  rejectedEnd,
  type Refusal,
  type ToolCallEnd,
} from './agent-tool-outcome.js';
import { withHeartbeat } from './heartbeat.js';
import { CODE } from '../workflows/error-codes.js';

export const DEFAULT_SYSTEM_PROMPT =
  'You are the assistant of a workflow automation service. Use the tools to look up records, entities, ' +
  `workflows and executions before answering. Tools that change data (${AGENT_GATED_TOOLS.join(', ')}) wait for ` +
  'a person to approve them; the approver may change their arguments, reject them or let them expire. If one ' +
  'is rejected or expires, respect that and say what you did instead. Answer briefly.';

/** The stored action does not allow running this call: nothing runs, the turn ends with this failure. */
const notApproved = (message: string, details?: { stored: 'pending' }) =>
  ApplicationFailure.create({ type: AGENT_ACTION_NOT_APPROVED, message, nonRetryable: true, ...(details ? { details: [details] } : {}) });

const sessionGone = () => ApplicationFailure.nonRetryable('The session no longer exists', CODE.not_found);

/**
 * Activities of the chat agent. Every write carries a key derived from the workflow's own ids
 * (turn, step, tool call), so a retried activity finds its row instead of writing it twice.
 */
export interface AgentActivityPorts extends AgentToolPorts {
  sql: Sql;
  stores: { agentActions: AgentActionStore };
  config: Pick<Config, 'SVC_AGENT_GATE_TTL' | 'SVC_AGENT_PRICES' | 'SVC_AGENT_PROVIDER_TIMEOUT_MS' | 'SVC_AGENT_MAX_TOOL_CALLS'>;
  connections: Pick<ConnectionService, 'resolve'>;
  users: Pick<UsersService, 'byId'>;
  auth: Pick<AuthService, 'principal'>;
  metrics: Pick<Metrics, 'modelTokens' | 'modelCost' | 'agentActions'>;
}

/** What the model-call activity uses. */
export type ModelCallPorts = Pick<AgentActivityPorts, 'sql' | 'config' | 'connections' | 'metrics'>;
/** What the gate activities use. */
export type GatePorts = Pick<AgentActivityPorts, 'sql' | 'stores' | 'config' | 'metrics'>;
/** What the tool activity uses: the tools' own ports, and who runs them. */
export type ToolRunPorts = AgentToolPorts & Pick<AgentActivityPorts, 'sql' | 'stores' | 'users' | 'auth'>;

/** Every agent activity, by the name Temporal schedules it under, over the ports it names. */
export function agentActivities(services: AgentActivityPorts) {
  return {
    agentBeginTurn: (input: { sessionId: string; turnId: string; content: string }) => agentBeginTurn(services, input),
    agentCallModel: (input: AgentModelCallInput) => agentCallModel(services, input),
    agentOpenGate: (input: { sessionId: string; turnId: string; actionId: string; call: AgentToolCall; expiry?: boolean }) => agentOpenGate(services, input),
    agentExpireAction: (input: { sessionId: string; actionId: string }) => agentExpireAction(services, input),
    agentRunTool: (input: AgentToolRunInput) => agentRunTool(services, input),
    agentFinishTurn: (input: AgentTurnEnd) => agentFinishTurn(services, input),
  };
}

/** Stores the user's message of a turn (turns begun before the lean-turn patch). */
export async function agentBeginTurn(ports: { sql: Sql }, input: { sessionId: string; turnId: string; content: string }): Promise<void> {
  await insertMessage(ports.sql, { sessionId: input.sessionId, stepKey: `user:${input.turnId}`, turnId: input.turnId, role: 'user', content: input.content });
}

/** One model call: loads the conversation, calls the provider (streaming when asked), stores the answer. */
export async function agentCallModel(ports: ModelCallPorts, input: AgentModelCallInput): Promise<AgentModelCallResult> {
  const { sql } = ports;
  const stepKey = `model:${input.turnId}:${input.step}`;
  // A turn's first call stores the user's message (as agentBeginTurn did before it), so the
  // conversation read after it holds it; a retry finds it stored. The session and its connection
  // are read meanwhile: two round trips of waiting before the provider is called, not four.
  const stored =
    input.userMessage !== undefined ? agentBeginTurn(ports, { sessionId: input.sessionId, turnId: input.turnId, content: input.userMessage }) : undefined;
  const sessionRead = loadSession(sql, input.sessionId);
  const connection = sessionRead.then((s) => (s ? ports.connections.resolve(s.provider_id, [s.owner_id]) : undefined));
  connection.catch(() => undefined);
  const [done, session, messages] = await Promise.all([
    stepMessage(sql, input.sessionId, stepKey, ['content', 'tool_calls', 'telemetry']),
    sessionRead,
    Promise.resolve(stored).then(() => loadHistory(sql, input.sessionId)),
  ]);
  if (done) return storedModelResult(done);
  if (!session) throw sessionGone();
  const answer = await completeTurn(ports, session, messages, input.streamChannel, connection);
  checkToolCallCount(answer.toolCalls, ports.config.SVC_AGENT_MAX_TOOL_CALLS);
  const reply = { ...answer, toolCalls: uniqueToolCallIds(answer.toolCalls) };
  return recordModelReply(ports, input, stepKey, session, reply);
}

/** Calls the session's provider, heartbeating; its errors become the activity's failures. */
async function completeTurn(
  ports: ModelCallPorts,
  session: SessionRow,
  messages: ChatMessage[],
  channel: string | undefined,
  /** The session's connection, resolved while the conversation was read. */
  resolved: Promise<Awaited<ReturnType<ModelCallPorts['connections']['resolve']>> | undefined>,
): Promise<ModelReply> {
  const context = Context.current();
  // A model that repeats its key (in its answer, a tool call or an error) does not get it stored.
  let redact: Redact | undefined;
  try {
    return await withHeartbeat(context, async () => {
      // The credential is decrypted here and nowhere else: never an activity argument or result.
      const connection = (await resolved.catch((err: unknown) => {
        throw connectionError(err, session.provider_id);
      }))!;
      redact = connection.redact;
      const attributes = { 'svc.provider': connection.type, 'svc.model': session.model, 'svc.streamed': Boolean(channel) };
      const reply = await inSpan('model call', attributes, () =>
        providerFor(connection).complete({
          model: session.model,
          system: session.system_prompt ?? DEFAULT_SYSTEM_PROMPT,
          messages,
          tools: toolSpecs(),
          timeoutMs: ports.config.SVC_AGENT_PROVIDER_TIMEOUT_MS,
          signal: context.cancellationSignal,
          ...(channel ? { onDelta: (delta: string) => publish(ports.sql, channel, { event: 'token', data: { delta } }) } : {}),
        }),
      );
      return connection.redact(reply);
    });
  } catch (err) {
    throw modelCallFailure(redact ? redactError(err, redact) : err);
  }
}

/** Prices and counts the answer, stores it under the step's key, and streams its tool calls. */
async function recordModelReply(
  ports: ModelCallPorts,
  input: AgentModelCallInput,
  stepKey: string,
  session: SessionRow,
  reply: ModelReply,
): Promise<AgentModelCallResult> {
  const costUsd = costOf(ports.config.SVC_AGENT_PRICES, session.model, reply.usage.tokensIn, reply.usage.tokensOut);
  const telemetry = { tokens_in: reply.usage.tokensIn, tokens_out: reply.usage.tokensOut, cost_usd: costUsd };
  countModelUse(ports.metrics, session.provider_type, 'agent', telemetry);
  const result = { text: reply.text, toolCalls: reply.toolCalls, tokensIn: reply.usage.tokensIn, tokensOut: reply.usage.tokensOut, costUsd };
  // An answer that ends the turn is announced once stored: its caller may answer with the outcome the workflow will give.
  const answered = input.announce && !reply.toolCalls.length ? answeredOutcome(input.announce, result, Date.now()) : undefined;
  await insertMessage(
    ports.sql,
    { sessionId: input.sessionId, stepKey, turnId: input.turnId, role: 'assistant', content: reply.text, toolCalls: reply.toolCalls, telemetry },
    answered && turnAnnouncement(input.turnId, answered),
  );
  if (input.streamChannel) {
    for (const call of reply.toolCalls) await publish(ports.sql, input.streamChannel, { event: 'tool_call', data: { tool: call.name, args: call.args } });
  }
  return result;
}

/**
 * Records a gated call as a pending action; nothing runs until a decision arrives. With
 * `expiry` the action gets its deadline (the session's gate_ttl_s or SVC_AGENT_GATE_TTL) and
 * the answer says how long the workflow's timer should wait; a retry finds the stored deadline.
 */
export async function agentOpenGate(
  ports: GatePorts,
  input: { sessionId: string; turnId: string; actionId: string; call: AgentToolCall; expiry?: boolean },
): Promise<AgentOpenedGate> {
  const summary = summarizeCall(input.call.name, input.call.args);
  let ttlSeconds: number | null = null;
  if (input.expiry) {
    const session = await loadSession(ports.sql, input.sessionId);
    if (!session) throw sessionGone();
    ttlSeconds = session.gate_ttl_s ?? ports.config.SVC_AGENT_GATE_TTL;
  }
  const row = await ports.stores.agentActions.open({
    actionId: input.actionId,
    sessionId: input.sessionId,
    turnId: input.turnId,
    call: input.call,
    summary,
    ttlSeconds,
  });
  const action = { action_id: input.actionId, tool: input.call.name, args: input.call.args, summary, expires_at: toIso(row?.expires_at) };
  return row?.remaining_ms != null ? { ...action, ttl_ms: Number(row.remaining_ms) } : action;
}

/**
 * The gate's timer fired: the action expires unless a decision was stored first (a caller
 * that claimed it holds its row lock until the workflow accepted the decision; this waits for
 * that). Answers the action's status afterwards: `expired`, or the decision that won.
 */
export async function agentExpireAction(
  ports: Pick<GatePorts, 'stores' | 'metrics'>,
  input: { sessionId: string; actionId: string },
): Promise<{ status: AgentActionStatus }> {
  const found = await ports.stores.agentActions.expire(input.actionId, input.sessionId);
  if (!found) throw ApplicationFailure.nonRetryable('The action no longer exists', CODE.not_found);
  if (found.expiredNow) ports.metrics.agentActions.inc({ status: 'expired' });
  return { status: found.status };
}

/**
 * Runs a tool as the session owner, or records its rejection or expiry as the result the model
 * reads. A gated tool runs only when the stored action is approved for exactly this call
 * (session, turn, tool call, tool, the model's arguments, the approver's edit): the workflow
 * deciding to run it is not enough (defence in depth).
 */
export async function agentRunTool(ports: ToolRunPorts, input: AgentToolRunInput): Promise<{ summary: string; args?: Record<string, unknown> }> {
  const done = await stepMessage(ports.sql, input.sessionId, input.stepKey, ['result_summary', 'args']);
  if (done) return { summary: done.result_summary as string, ...(done.args ? { args: done.args } : {}) };
  const { call, decision } = input;
  const action = await authorisedAction(ports, input);
  const args = action?.edited_args ?? call.args;
  if (decision && action) {
    await insertMessage(ports.sql, {
      sessionId: input.sessionId,
      stepKey: `decision:${decision.actionId}`,
      turnId: input.turnId,
      role: 'decision',
      content: action.status,
      toolName: call.name,
      args: call.args,
      decision: decisionRecord(decision, action),
    });
  }
  const end = await endOfCall(ports, input, action);
  await insertMessage(ports.sql, {
    sessionId: input.sessionId,
    stepKey: input.stepKey,
    turnId: input.turnId,
    role: 'tool',
    content: end.content,
    toolCallId: call.id,
    toolName: call.name,
    args,
    resultSummary: end.summary,
  });
  if (action) await ports.stores.agentActions.recordOutcome(action.action_id, { ok: end.ok, result_summary: end.summary });
  if (input.streamChannel) await publish(ports.sql, input.streamChannel, { event: 'tool_result', data: { tool: call.name, result: end.streamed } });
  return { summary: end.summary, args };
}

/**
 * Re-authorisation: a gated call's stored action, checked against the decision the workflow was
 * given (undefined for a tool that is not gated). Throws when the call may not run.
 */
async function authorisedAction(ports: Pick<ToolRunPorts, 'stores'>, input: AgentToolRunInput): Promise<ActionRow | undefined> {
  const { call, decision } = input;
  if (!isGatedTool(call.name)) {
    if (decision) throw notApproved(`${call.name} is not gated; it takes no decision`);
    return undefined;
  }
  if (!decision) throw notApproved(`${call.name} is gated: it runs only with an approved action`);
  // FOR SHARE waits for a decision being taken on this row (the API holds the row lock until
  // the workflow accepted it), so the status read is the committed outcome.
  const row = await ports.stores.agentActions.forCall({
    actionId: decision.actionId,
    sessionId: input.sessionId,
    turnId: input.turnId,
    call,
    editedArgs: decision.editedArgs,
  });
  const refusal: Refusal | undefined = gateRefusal(call.name, decision, row);
  if (refusal) throw notApproved(refusal.message, refusal.details);
  return row;
}

/** How the call ends: expired, rejected, already started once, or run now as its runner. */
async function endOfCall(ports: ToolRunPorts, input: AgentToolRunInput, action: ActionRow | undefined): Promise<ToolCallEnd> {
  if (action?.status === 'expired') return expiredEnd(action.decided_at);
  if (action?.status === 'rejected') return rejectedEnd(action.note);
  // An approved side effect runs at most once: a retry after a worker died mid-call cannot know
  // whether it happened, so it says so instead of doing it twice.
  if (action && !(await ports.stores.agentActions.claimRun(action.action_id))) return outcomeUnknownEnd();
  const session = await loadSession(ports.sql, input.sessionId);
  if (!session) throw sessionGone();
  const editor = editorOf(action, session.owner_id);
  const runner = await ownerOf(ports, editor ?? session.owner_id);
  const edited = action?.edited_args ?? undefined;
  const outcome = runner ? await runTool(ports, runner, input.call.name, edited ?? input.call.args) : noRunnerOutcome(editor);
  return ranEnd(input.call, edited, action?.note, outcome);
}

/**
 * Records how a turn segment ended when the model's answer is not the end: the closing message
 * of the model-call limit, or the provider error (kept in the history, never sent to the model).
 */
export async function agentFinishTurn(ports: { sql: Sql }, input: AgentTurnEnd): Promise<void> {
  if (!input.closingMessage && !input.error) return;
  await insertMessage(ports.sql, {
    sessionId: input.sessionId,
    stepKey: `end:${input.turnId}:${input.step}`,
    turnId: input.turnId,
    role: 'assistant',
    content: input.closingMessage ?? '',
    telemetry: { ...input.telemetry, ...(input.error ? { error: input.error } : {}) },
  });
}
