import { ApplicationFailure, Context } from '@temporalio/activity';
import { costOf } from '../src/agent/agent.pricing.js';
import { loadHistory, loadSession, ownerOf } from '../src/agent/agent.store.js';
import { publish } from '../src/agent/agent.stream.js';
import { runTool, summarizeCall, summarizeResult, toolSpecs } from '../src/agent/agent.tools.js';
import { ProviderError, providerFor } from '../src/agent/providers/index.js';
import { AppError } from '../src/platform/errors.js';
import type { Services } from '../src/services.js';
import type {
  AgentModelCallInput,
  AgentModelCallResult,
  AgentPendingAction,
  AgentToolCall,
  AgentToolRunInput,
  AgentTurnEnd,
} from '../workflows/defs.js';

/** What the model reads as a tool's result; big results are cut so one call cannot flood the context. */
const MAX_TOOL_CONTENT = 16 * 1024;

export const DEFAULT_SYSTEM_PROMPT =
  'You are the assistant of a workflow automation service. Use the tools to look up records, entities, ' +
  'workflows and executions before answering. Tools that change data (records_create, records_update, ' +
  'records_delete, workflow_run) wait for the user to approve them; if the user rejects one, respect the ' +
  'decision and say what you did instead. Answer briefly.';

/**
 * Activities of the chat agent. Every write carries a key derived from the workflow's own ids
 * (turn, step, tool call), so a retried activity finds its row instead of writing it twice.
 */
export function agentActivities(services: Services) {
  const { sql } = services;

  async function insertMessage(row: {
    sessionId: string;
    stepKey: string;
    turnId: string;
    role: 'user' | 'assistant' | 'tool' | 'decision';
    content: string;
    toolCalls?: AgentToolCall[];
    toolCallId?: string;
    toolName?: string;
    args?: unknown;
    resultSummary?: string;
    decision?: unknown;
    telemetry?: unknown;
  }): Promise<void> {
    await sql.query(
      `insert into agent_messages (session_id, step_key, turn_id, role, content, tool_calls, tool_call_id, tool_name, args, result_summary, decision, telemetry)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict (session_id, step_key) do nothing`,
      [
        row.sessionId,
        row.stepKey,
        row.turnId,
        row.role,
        row.content,
        row.toolCalls ? JSON.stringify(row.toolCalls) : null,
        row.toolCallId ?? null,
        row.toolName ?? null,
        row.args === undefined ? null : JSON.stringify(row.args),
        row.resultSummary ?? null,
        row.decision === undefined ? null : JSON.stringify(row.decision),
        row.telemetry === undefined ? null : JSON.stringify(row.telemetry),
      ],
    );
  }

  /** Marks an approved action as started; false when an earlier attempt already started it. */
  async function claimRun(actionId: string): Promise<boolean> {
    const rows = await sql.query('update agent_actions set started_at = now() where action_id = ? and started_at is null returning action_id', [actionId]);
    return rows.length > 0;
  }

  return {
    async agentBeginTurn(input: { sessionId: string; turnId: string; content: string }): Promise<void> {
      await insertMessage({ sessionId: input.sessionId, stepKey: `user:${input.turnId}`, turnId: input.turnId, role: 'user', content: input.content });
    },

    /** One model call: loads the conversation, calls the provider (streaming when asked), stores the answer. */
    async agentCallModel(input: AgentModelCallInput): Promise<AgentModelCallResult> {
      const stepKey = `model:${input.turnId}:${input.step}`;
      const [done] = await sql.query<{ content: string; tool_calls: AgentToolCall[] | null; telemetry: { tokens_in: number; tokens_out: number; cost_usd: number } | null }>(
        'select content, tool_calls, telemetry from agent_messages where session_id = ? and step_key = ?',
        [input.sessionId, stepKey],
      );
      if (done) {
        return { text: done.content, toolCalls: done.tool_calls ?? [], tokensIn: done.telemetry?.tokens_in ?? 0, tokensOut: done.telemetry?.tokens_out ?? 0, costUsd: done.telemetry?.cost_usd ?? 0 };
      }
      const session = await loadSession(sql, input.sessionId);
      if (!session) throw ApplicationFailure.nonRetryable('The session no longer exists', 'not_found');
      const messages = await loadHistory(sql, input.sessionId);
      let reply;
      // A model call can take minutes; heartbeats let Temporal notice a dead worker in seconds and
      // retry the call elsewhere instead of waiting for the start-to-close timeout.
      const context = Context.current();
      const beat = setInterval(() => context.heartbeat(), 1000);
      try {
        // The credential is decrypted here and nowhere else: never an activity argument or result.
        const connection = await services.connections.resolve(session.provider_id).catch((err: unknown) => {
          if (err instanceof AppError) throw new ProviderError('provider_error', `The provider connection ${session.provider_id} no longer exists`);
          throw err;
        });
        const channel = input.streamChannel;
        reply = await providerFor(connection).complete({
          model: session.model,
          system: session.system_prompt ?? DEFAULT_SYSTEM_PROMPT,
          messages,
          tools: toolSpecs(),
          timeoutMs: services.config.SVC_AGENT_PROVIDER_TIMEOUT_MS,
          signal: context.cancellationSignal,
          ...(channel ? { onDelta: (delta: string) => publish(sql, channel, { event: 'token', data: { delta } }) } : {}),
        });
      } catch (err) {
        if (err instanceof ProviderError) throw ApplicationFailure.create({ type: err.code, message: err.message, nonRetryable: !err.retryable });
        throw err;
      } finally {
        clearInterval(beat);
      }
      const costUsd = costOf(services.config.SVC_AGENT_PRICES, session.model, reply.usage.tokensIn, reply.usage.tokensOut);
      const telemetry = { tokens_in: reply.usage.tokensIn, tokens_out: reply.usage.tokensOut, cost_usd: costUsd };
      await insertMessage({ sessionId: input.sessionId, stepKey, turnId: input.turnId, role: 'assistant', content: reply.text, toolCalls: reply.toolCalls, telemetry });
      if (input.streamChannel) {
        for (const call of reply.toolCalls) await publish(sql, input.streamChannel, { event: 'tool_call', data: { tool: call.name, args: call.args } });
      }
      return { text: reply.text, toolCalls: reply.toolCalls, tokensIn: reply.usage.tokensIn, tokensOut: reply.usage.tokensOut, costUsd };
    },

    /** Records a gated call as a pending action; nothing runs until a decision arrives. */
    async agentOpenGate(input: { sessionId: string; turnId: string; actionId: string; call: AgentToolCall }): Promise<AgentPendingAction> {
      const summary = summarizeCall(input.call.name, input.call.args);
      await sql.query(
        `insert into agent_actions (action_id, session_id, turn_id, tool_call_id, tool, args, summary, status)
         values (?, ?, ?, ?, ?, ?, ?, 'pending') on conflict (action_id) do nothing`,
        [input.actionId, input.sessionId, input.turnId, input.call.id, input.call.name, JSON.stringify(input.call.args), summary],
      );
      return { action_id: input.actionId, tool: input.call.name, args: input.call.args, summary };
    },

    /** Runs a tool as the session owner, or records its rejection as the result the model reads. */
    async agentRunTool(input: AgentToolRunInput): Promise<{ summary: string }> {
      const [done] = await sql.query<{ result_summary: string }>('select result_summary from agent_messages where session_id = ? and step_key = ?', [input.sessionId, input.stepKey]);
      if (done) return { summary: done.result_summary };
      const { call, decision } = input;
      if (decision) {
        await insertMessage({
          sessionId: input.sessionId,
          stepKey: `decision:${decision.actionId}`,
          turnId: input.turnId,
          role: 'decision',
          content: decision.approved ? 'approved' : 'rejected',
          toolName: call.name,
          args: call.args,
          decision: { action_id: decision.actionId, approved: decision.approved, note: decision.note ?? null, decided_by: decision.decidedBy },
        });
      }
      let content: string;
      let summary: string;
      let streamed: unknown;
      if (decision && !decision.approved) {
        const result = { error: 'rejected_by_user', message: 'The user rejected this action; it was not carried out.', note: decision.note ?? null };
        content = JSON.stringify(result);
        summary = `rejected by the user${decision.note ? `: ${decision.note}` : ''}`;
        streamed = result;
      } else if (decision && !(await claimRun(decision.actionId))) {
        // An approved side effect runs at most once: a retry after a worker died mid-call cannot
        // know whether it happened, so it says so instead of doing it twice.
        const result = { error: 'outcome_unknown', message: 'The worker stopped while this action ran; it may or may not have been carried out. Check before retrying.' };
        content = JSON.stringify(result);
        summary = `error: ${result.message}`;
        streamed = result;
      } else {
        const session = await loadSession(sql, input.sessionId);
        if (!session) throw ApplicationFailure.nonRetryable('The session no longer exists', 'not_found');
        const owner = await ownerOf(services, session.owner_id);
        const outcome = owner
          ? await runTool(services, owner, call.name, call.args)
          : { ok: false, result: { error: 'forbidden', message: 'The session owner no longer exists' } };
        const text = JSON.stringify(outcome.result) ?? 'null';
        content = text.length > MAX_TOOL_CONTENT ? `${text.slice(0, MAX_TOOL_CONTENT)}... (truncated)` : text;
        summary = summarizeResult(outcome);
        streamed = outcome.result;
      }
      await insertMessage({ sessionId: input.sessionId, stepKey: input.stepKey, turnId: input.turnId, role: 'tool', content, toolCallId: call.id, toolName: call.name, args: call.args, resultSummary: summary });
      if (input.streamChannel) await publish(sql, input.streamChannel, { event: 'tool_result', data: { tool: call.name, result: streamed } });
      return { summary };
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
