import { ApplicationFailure, Context } from '@temporalio/activity';
import { costOf } from '../src/providers/pricing.js';
import { countModelUse, type Metrics } from '../src/platform/metrics.js';
import { inSpan } from '../src/platform/tracing.js';
import { insertMessage as storeMessage, loadHistory, loadSession, ownerOf, stepMessage, type ActionRow } from '../src/agent/agent.store.js';
import type { AgentActionStore } from '../src/agent/agent-action.store.js';
import { publish } from '../src/agent/agent.stream.js';
import { runTool, summarizeCall, summarizeResult, toolSpecs } from '../src/agent/agent.tools.js';
import { ProviderError, providerFor } from '../src/providers/index.js';
import { AppError } from '../src/platform/errors.js';
import { toIso } from '../src/db/sql.js';
import type { AuthService } from '../src/auth/auth.service.js';
import type { UsersService } from '../src/auth/users.service.js';
import type { Config } from '../src/config.js';
import type { ConnectionService } from '../src/connections/connection.service.js';
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
import { CODE } from '../workflows/error-codes.js';

/** What the model reads as a tool's result; big results are cut so one call cannot flood the context. */
const MAX_TOOL_CONTENT = 16 * 1024;

export const DEFAULT_SYSTEM_PROMPT =
  'You are the assistant of a workflow automation service. Use the tools to look up records, entities, ' +
  `workflows and executions before answering. Tools that change data (${AGENT_GATED_TOOLS.join(', ')}) wait for ` +
  'a person to approve them; the approver may change their arguments, reject them or let them expire. If one ' +
  'is rejected or expires, respect that and say what you did instead. Answer briefly.';

/** The stored action does not allow running this call: nothing runs, the turn ends with this failure. */
const notApproved = (message: string, details?: { stored: 'pending' }) =>
  ApplicationFailure.create({ type: AGENT_ACTION_NOT_APPROVED, message, nonRetryable: true, ...(details ? { details: [details] } : {}) });

/**
 * Activities of the chat agent. Every write carries a key derived from the workflow's own ids
 * (turn, step, tool call), so a retried activity finds its row instead of writing it twice.
 */
export interface AgentActivityPorts extends AgentToolPorts {
  sql: Sql;
  stores: { agentActions: AgentActionStore };
  config: Pick<Config, 'SVC_AGENT_GATE_TTL' | 'SVC_AGENT_PRICES' | 'SVC_AGENT_PROVIDER_TIMEOUT_MS'>;
  connections: Pick<ConnectionService, 'resolve'>;
  users: Pick<UsersService, 'byId'>;
  auth: Pick<AuthService, 'principal'>;
  metrics: Pick<Metrics, 'modelTokens' | 'modelCost' | 'agentActions'>;
}

export function agentActivities(services: AgentActivityPorts) {
  const { sql } = services;
  const { agentActions } = services.stores;

  const insertMessage = (row: Parameters<typeof storeMessage>[1]) => storeMessage(sql, row);

  return {
    async agentBeginTurn(input: { sessionId: string; turnId: string; content: string }): Promise<void> {
      await insertMessage({ sessionId: input.sessionId, stepKey: `user:${input.turnId}`, turnId: input.turnId, role: 'user', content: input.content });
    },

    /** One model call: loads the conversation, calls the provider (streaming when asked), stores the answer. */
    async agentCallModel(input: AgentModelCallInput): Promise<AgentModelCallResult> {
      const stepKey = `model:${input.turnId}:${input.step}`;
      // A turn's first call stores the user's message (as agentBeginTurn did before it), so the
      // conversation read below holds it; a retry finds it stored.
      if (input.userMessage !== undefined) {
        await insertMessage({ sessionId: input.sessionId, stepKey: `user:${input.turnId}`, turnId: input.turnId, role: 'user', content: input.userMessage });
      }
      // The three reads are independent: one round trip of waiting, not three.
      const [done, session, messages] = await Promise.all([
        stepMessage(sql, input.sessionId, stepKey, ['content', 'tool_calls', 'telemetry']),
        loadSession(sql, input.sessionId),
        loadHistory(sql, input.sessionId),
      ]);
      if (done) {
        return {
          text: done.content,
          toolCalls: done.tool_calls ?? [],
          tokensIn: done.telemetry?.tokens_in ?? 0,
          tokensOut: done.telemetry?.tokens_out ?? 0,
          costUsd: done.telemetry?.cost_usd ?? 0,
        };
      }
      if (!session) throw ApplicationFailure.nonRetryable('The session no longer exists', CODE.not_found);
      let reply;
      // A model call can take minutes; heartbeats let Temporal notice a dead worker in seconds and
      // retry the call elsewhere instead of waiting for the start-to-close timeout.
      const context = Context.current();
      const beat = setInterval(() => context.heartbeat(), 1000);
      try {
        // The credential is decrypted here and nowhere else: never an activity argument or result.
        const connection = await services.connections.resolve(session.provider_id, [session.owner_id]).catch((err: unknown) => {
          if (err instanceof AppError && err.status === 403) {
            throw new ProviderError(CODE.forbidden, `The provider connection ${session.provider_id} is no longer shared with the session's owner`);
          }
          if (err instanceof AppError) throw new ProviderError(CODE.provider_error, `The provider connection ${session.provider_id} no longer exists`);
          throw err;
        });
        const channel = input.streamChannel;
        reply = await inSpan('model call', { 'svc.provider': connection.type, 'svc.model': session.model, 'svc.streamed': Boolean(channel) }, () =>
          providerFor(connection).complete({
            model: session.model,
            system: session.system_prompt ?? DEFAULT_SYSTEM_PROMPT,
            messages,
            tools: toolSpecs(),
            timeoutMs: services.config.SVC_AGENT_PROVIDER_TIMEOUT_MS,
            signal: context.cancellationSignal,
            ...(channel ? { onDelta: (delta: string) => publish(sql, channel, { event: 'token', data: { delta } }) } : {}),
          }),
        );
      } catch (err) {
        if (err instanceof ProviderError) throw ApplicationFailure.create({ type: err.code, message: err.message, nonRetryable: !err.retryable });
        throw err;
      } finally {
        clearInterval(beat);
      }
      const costUsd = costOf(services.config.SVC_AGENT_PRICES, session.model, reply.usage.tokensIn, reply.usage.tokensOut);
      const telemetry = { tokens_in: reply.usage.tokensIn, tokens_out: reply.usage.tokensOut, cost_usd: costUsd };
      countModelUse(services.metrics, session.provider_type, 'agent', telemetry);
      await insertMessage({
        sessionId: input.sessionId,
        stepKey,
        turnId: input.turnId,
        role: 'assistant',
        content: reply.text,
        toolCalls: reply.toolCalls,
        telemetry,
      });
      if (input.streamChannel) {
        for (const call of reply.toolCalls) await publish(sql, input.streamChannel, { event: 'tool_call', data: { tool: call.name, args: call.args } });
      }
      return { text: reply.text, toolCalls: reply.toolCalls, tokensIn: reply.usage.tokensIn, tokensOut: reply.usage.tokensOut, costUsd };
    },

    /**
     * Records a gated call as a pending action; nothing runs until a decision arrives. With
     * `expiry` the action gets its deadline (the session's gate_ttl_s or SVC_AGENT_GATE_TTL) and
     * the answer says how long the workflow's timer should wait; a retry finds the stored deadline.
     */
    async agentOpenGate(input: { sessionId: string; turnId: string; actionId: string; call: AgentToolCall; expiry?: boolean }): Promise<AgentOpenedGate> {
      const summary = summarizeCall(input.call.name, input.call.args);
      let ttlSeconds: number | null = null;
      if (input.expiry) {
        const session = await loadSession(sql, input.sessionId);
        if (!session) throw ApplicationFailure.nonRetryable('The session no longer exists', CODE.not_found);
        ttlSeconds = session.gate_ttl_s ?? services.config.SVC_AGENT_GATE_TTL;
      }
      const row = await agentActions.open({
        actionId: input.actionId,
        sessionId: input.sessionId,
        turnId: input.turnId,
        call: input.call,
        summary,
        ttlSeconds,
      });
      const action = { action_id: input.actionId, tool: input.call.name, args: input.call.args, summary, expires_at: toIso(row?.expires_at) };
      return row?.remaining_ms != null ? { ...action, ttl_ms: Number(row.remaining_ms) } : action;
    },

    /**
     * The gate's timer fired: the action expires unless a decision was stored first (a caller
     * that claimed it holds its row lock until the workflow accepted the decision; this waits for
     * that). Answers the action's status afterwards: `expired`, or the decision that won.
     */
    async agentExpireAction(input: { sessionId: string; actionId: string }): Promise<{ status: AgentActionStatus }> {
      const found = await agentActions.expire(input.actionId, input.sessionId);
      if (!found) throw ApplicationFailure.nonRetryable('The action no longer exists', CODE.not_found);
      if (found.expiredNow) services.metrics.agentActions.inc({ status: 'expired' });
      return { status: found.status };
    },

    /**
     * Runs a tool as the session owner, or records its rejection or expiry as the result the model
     * reads. A gated tool runs only when the stored action is approved for exactly this call
     * (session, turn, tool call, tool, the model's arguments, the approver's edit): the workflow
     * deciding to run it is not enough (defence in depth).
     */
    async agentRunTool(input: AgentToolRunInput): Promise<{ summary: string; args?: Record<string, unknown> }> {
      const done = await stepMessage(sql, input.sessionId, input.stepKey, ['result_summary', 'args']);
      if (done) return { summary: done.result_summary as string, ...(done.args ? { args: done.args } : {}) };
      const { call, decision } = input;
      let action: ActionRow | undefined;
      if (isGatedTool(call.name)) {
        if (!decision) throw notApproved(`${call.name} is gated: it runs only with an approved action`);
        // FOR SHARE waits for a decision being taken on this row (the API holds the row lock until
        // the workflow accepted it), so the status read is the committed outcome.
        const row = await agentActions.forCall({
          actionId: decision.actionId,
          sessionId: input.sessionId,
          turnId: input.turnId,
          call,
          editedArgs: decision.editedArgs,
        });
        const expected: AgentActionStatus = decision.expired ? 'expired' : decision.approved ? 'approved' : 'rejected';
        if (!row || !row.same_call) throw notApproved(`Action ${decision.actionId} is not the action of this ${call.name} call`);
        // Still pending: the decision reached the workflow, but the API that sent it rolled its
        // claim back (its call failed after Temporal had admitted the update). The workflow opens
        // the gate again rather than end the turn.
        if (row.status === 'pending' && !decision.expired)
          throw notApproved(`Action ${decision.actionId} is still pending: its decision was not stored`, { stored: 'pending' });
        if (row.status !== expected) throw notApproved(`Action ${decision.actionId} is ${row.status}, not ${expected}`);
        if (!row.same_edit) throw notApproved(`Action ${decision.actionId} was approved with other arguments`);
        action = row;
      } else if (decision) {
        throw notApproved(`${call.name} is not gated; it takes no decision`);
      }
      const edited = action?.edited_args ?? undefined;
      const args = edited ?? call.args;
      if (decision && action) {
        await insertMessage({
          sessionId: input.sessionId,
          stepKey: `decision:${decision.actionId}`,
          turnId: input.turnId,
          role: 'decision',
          content: action.status,
          toolName: call.name,
          args: call.args,
          decision: {
            action_id: decision.actionId,
            status: action.status as Exclude<AgentActionStatus, 'pending'>,
            approved: action.status === 'approved',
            note: action.note,
            decided_by: action.decided_by,
            ...(edited ? { edited_args: edited } : {}),
          },
        });
      }
      let content: string;
      let summary: string;
      let streamed: unknown;
      let ok = false;
      if (action?.status === 'expired') {
        const result = {
          error: CODE.action_expired,
          message: `Nobody decided on this action before it expired at ${toIso(action.decided_at)}; it was not carried out.`,
        };
        content = JSON.stringify(result);
        summary = 'expired: nobody approved it in time; it was not carried out';
        streamed = result;
      } else if (action?.status === 'rejected') {
        const result = { error: CODE.rejected_by_user, message: 'The user rejected this action; it was not carried out.', note: action.note ?? null };
        content = JSON.stringify(result);
        summary = `rejected by the user${action.note ? `: ${action.note}` : ''}`;
        streamed = result;
      } else if (action && !(await agentActions.claimRun(action.action_id))) {
        // An approved side effect runs at most once: a retry after a worker died mid-call cannot
        // know whether it happened, so it says so instead of doing it twice.
        const result = {
          error: CODE.outcome_unknown,
          message: 'The worker stopped while this action ran; it may or may not have been carried out. Check before retrying.',
        };
        content = JSON.stringify(result);
        summary = `error: ${result.message}`;
        streamed = result;
      } else {
        const session = await loadSession(sql, input.sessionId);
        if (!session) throw ApplicationFailure.nonRetryable('The session no longer exists', CODE.not_found);
        // The call runs with the owner's rights; arguments someone else wrote run with that
        // approver's rights instead (an edit is their call, not the owner's: approving must not
        // let anyone reach what only the owner may).
        const approver = action?.decided_by ?? undefined;
        const editor = edited && approver !== undefined && approver !== session.owner_id ? approver : undefined;
        const runner = await ownerOf(services, editor ?? session.owner_id);
        const outcome = runner
          ? await runTool(services, runner, call.name, args)
          : { ok: false, result: { error: CODE.forbidden, message: editor ? 'The approver no longer exists' : 'The session owner no longer exists' } };
        ok = outcome.ok;
        // The model learns that what ran is not what it proposed, and both versions.
        const told = edited
          ? {
              edited_by_approver: true,
              message: 'The approver changed the arguments before approving: the tool ran with `args`, not with the `proposed_args` you sent.',
              proposed_args: call.args,
              args: edited,
              ...(action?.note ? { note: action.note } : {}),
              result: outcome.result,
            }
          : outcome.result;
        const text = JSON.stringify(told) ?? 'null';
        content = text.length > MAX_TOOL_CONTENT ? `${text.slice(0, MAX_TOOL_CONTENT)}... (truncated)` : text;
        summary = (edited ? 'ran with arguments edited by the approver: ' : '') + summarizeResult(outcome);
        streamed = outcome.result;
      }
      await insertMessage({
        sessionId: input.sessionId,
        stepKey: input.stepKey,
        turnId: input.turnId,
        role: 'tool',
        content,
        toolCallId: call.id,
        toolName: call.name,
        args,
        resultSummary: summary,
      });
      if (action) {
        await agentActions.recordOutcome(action.action_id, { ok, result_summary: summary });
      }
      if (input.streamChannel) await publish(sql, input.streamChannel, { event: 'tool_result', data: { tool: call.name, result: streamed } });
      return { summary, args };
    },

    /**
     * Records how a turn segment ended when the model's answer is not the end: the closing message
     * of the model-call limit, or the provider error (kept in the history, never sent to the model).
     */
    async agentFinishTurn(input: AgentTurnEnd): Promise<void> {
      if (!input.closingMessage && !input.error) return;
      await insertMessage({
        sessionId: input.sessionId,
        stepKey: `end:${input.turnId}:${input.step}`,
        turnId: input.turnId,
        role: 'assistant',
        content: input.closingMessage ?? '',
        telemetry: { ...input.telemetry, ...(input.error ? { error: input.error } : {}) },
      });
    },
  };
}
