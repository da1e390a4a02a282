import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError } from '@temporalio/common';
import type { Principal } from '../auth/auth.service.js';
import type { Config } from '../config.js';
import type { ConnectionService } from '../connections/connection.service.js';
import type { Sql } from '../db/sql.js';
import { toIso } from '../db/sql.js';
import { AppError, conflict, invalidRequest, notFound, rateLimited } from '../platform/errors.js';
import type { RateLimiter } from '../platform/rate-limit.js';
import type { TemporalHandle } from '../temporal/connection.js';
import { agentMessageUpdate } from '../../workflows/agent.updates.js';
import {
  AGENT_SESSION_WORKFLOW,
  agentSessionWorkflowId,
  type AgentApprovalPolicy,
  type AgentMessageArgs,
  type AgentSessionInput,
} from '../../workflows/defs.js';
import { hasPrice } from '../providers/pricing.js';
import { deleteSession, insertSession, lastMessage, loadMessages, loadSession, sessionUsage, type SessionRow } from './agent.store.js';
import type { AgentActionStore } from './agent-action.store.js';
import { acceptedTurn, completedTurn, countOutcome, type AcceptedTurn } from './agent.turns.js';
import type { Announcements } from '../platform/announcements.js';
import type { AgentTurnOutcome } from '../../workflows/defs.js';
import type { WorkflowHandle } from '@temporalio/client';
import type { Metrics } from '../platform/metrics.js';
import { MODEL_CONNECTION_TYPES } from '../providers/index.js';

/** How long a message refused while the turn before is being completed waits for it (finishingTurn). */
const FINISHING_TURN_WAIT_MS = 5_000;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface NewSession {
  provider_id: number;
  model_id: string;
  system_prompt_override?: string | undefined;
  approval?: AgentApprovalPolicy | undefined;
  gate_ttl_s?: number | undefined;
  budget_usd?: number | undefined;
}

/** Sessions, messages and decisions: the API side of the chat agent (the turn itself runs in Temporal). */
export class AgentService {
  constructor(
    private readonly sql: Sql,
    private readonly actions: AgentActionStore,
    private readonly connections: ConnectionService,
    private readonly temporal: TemporalHandle,
    private readonly config: Config,
    private readonly limiter: Pick<RateLimiter, 'hit'>,
    private readonly metrics?: Pick<Metrics, 'agentTurns'>,
    /** Answers announced by model calls (turnAnsweredAnnouncements): a turn without a stream is answered from them. */
    private readonly turnAnswers?: Pick<Announcements<AgentTurnOutcome>, 'heard'>,
  ) {}

  async createSession(principal: Principal, input: NewSession): Promise<{ session_id: string }> {
    // Every session is a workflow that stays open: how fast one user may open them is bounded.
    const quota = await this.limiter.hit(`agent-sessions:${principal.id}`, this.config.SVC_AGENT_MAX_SESSIONS_PER_HOUR, 3600);
    if (!quota.allowed) throw rateLimited(quota.retryAfterSeconds);
    // A session uses its provider for its owner: the connection must be theirs to use. One answer
    // for a connection that does not exist and one not shared with the caller, so that another
    // user's connection ids cannot be told from unused ones.
    if (!(await this.connections.usableBy([input.provider_id], [principal.id])).has(input.provider_id)) {
      throw invalidRequest(`provider_id ${input.provider_id} is not a connection you may use (yours, or one shared with you)`, { field: 'provider_id' });
    }
    const connection = await this.connections.get(input.provider_id);
    if (!(MODEL_CONNECTION_TYPES as readonly string[]).includes(connection.type)) {
      throw invalidRequest(`provider_id ${input.provider_id} is a connection of type ${connection.type}; a model provider is of type openai or anthropic`, {
        field: 'provider_id',
      });
    }
    const id = randomUUID();
    await insertSession(this.sql, {
      id,
      ownerId: principal.id,
      providerId: connection.id,
      providerType: connection.type,
      model: input.model_id,
      systemPrompt: input.system_prompt_override ?? null,
      approval: input.approval ?? 'owner',
      gateTtlS: input.gate_ttl_s ?? null,
      budgetUsd: input.budget_usd ?? null,
    });
    try {
      await this.startWorkflow(id);
    } catch (err) {
      await deleteSession(this.sql, id);
      throw err;
    }
    return { session_id: id };
  }

  private async startWorkflow(id: string): Promise<void> {
    await this.temporal.client.workflow.start(AGENT_SESSION_WORKFLOW, {
      workflowId: agentSessionWorkflowId(id),
      taskQueue: this.temporal.taskQueue,
      args: [
        {
          sessionId: id,
          maxModelCalls: this.config.SVC_AGENT_MAX_MODEL_CALLS,
          updatesPerRun: this.config.SVC_AGENT_UPDATES_PER_RUN,
        } satisfies AgentSessionInput,
      ],
    });
  }

  /** The session when `principal` owns it or administers the service; otherwise it does not exist for them. */
  async visible(principal: Principal, id: string): Promise<SessionRow> {
    const session = UUID.test(id) ? await loadSession(this.sql, id) : undefined;
    if (!session || (session.owner_id !== principal.id && principal.role !== 'administrator')) throw notFound('Session');
    return session;
  }

  async view(principal: Principal, id: string) {
    const session = await this.visible(principal, id);
    const messages = await loadMessages(this.sql, id);
    const pending = await this.actions.pendingOf(id);
    const totals = await sessionUsage(this.sql, id);
    const budget = session.budget_usd === null ? null : Number(session.budget_usd);
    const priceKnown = hasPrice(this.config.SVC_AGENT_PRICES, session.model);
    return {
      session_id: session.id,
      provider_id: session.provider_id,
      provider_type: session.provider_type,
      model_id: session.model,
      system_prompt_override: session.system_prompt,
      owner: { id: session.owner_id, login: session.owner_login },
      created_at: toIso(session.created_at)!,
      turn_count: messages.filter((m) => m.role === 'user').length,
      approval: session.approval,
      gate_ttl_s: session.gate_ttl_s ?? this.config.SVC_AGENT_GATE_TTL,
      totals,
      budget_usd: budget,
      budget_exceeded: budget !== null && totals.cost_usd >= budget,
      price_known: priceKnown,
      ...(priceKnown ? {} : { price_note: `No price is configured for ${session.model} (SVC_AGENT_PRICES); its cost counts as 0` }),
      pending_action: pending
        ? { action_id: pending.action_id, tool: pending.tool, args: pending.args, summary: pending.summary, expires_at: toIso(pending.expires_at) }
        : null,
      messages: messages.map((m, index) => ({
        seq: index + 1,
        role: m.role,
        content: m.content,
        ...(m.tool_calls?.length ? { tool_calls: m.tool_calls.map((c) => ({ id: c.id, name: c.name, args: c.args })) } : {}),
        ...(m.tool_name ? { tool: m.tool_name } : {}),
        ...(m.args ? { args: m.args } : {}),
        ...(m.result_summary !== null ? { result_summary: m.result_summary } : {}),
        ...(m.decision ? { decision: { status: m.decision.status ?? (m.decision.approved ? 'approved' : 'rejected'), ...m.decision } } : {}),
        ...(m.telemetry ? { telemetry: m.telemetry } : {}),
        created_at: toIso(m.created_at)!,
      })),
    };
  }

  /**
   * Runs a message turn to its outcome, answered by whichever comes first: the update's outcome,
   * or the announcement of its model call that the answer ending the turn is stored (the same
   * outcome, a workflow task sooner). A refusal comes with the update, before any announcement.
   */
  private async completedTurn(handle: WorkflowHandle, args: [AgentMessageArgs], updateId: string, turnId: string): Promise<AcceptedTurn> {
    if (!this.turnAnswers) return completedTurn(() => handle.executeUpdate(agentMessageUpdate, { args, updateId }));
    const done = new AbortController();
    const announced = this.turnAnswers.heard(turnId, done.signal);
    const update = handle.executeUpdate(agentMessageUpdate, { args, updateId });
    // Answered from the announcement, the update goes on to the same outcome in the workflow.
    update.catch(() => undefined);
    try {
      return await completedTurn(() => Promise.race([update, announced]));
    } finally {
      done.abort();
    }
  }

  /**
   * Whether the session's last turn was answered and its workflow may still be completing it (its
   * last message is an answer with no tool calls); if so, waits for that turn's update to complete
   * (at most FINISHING_TURN_WAIT_MS), so that a message sent right after its answer is taken.
   */
  private async finishingTurn(sessionId: string, handle: WorkflowHandle): Promise<boolean> {
    const last = await lastMessage(this.sql, sessionId);
    if (!last || last.role !== 'assistant' || last.tool_calls?.length) return false;
    const done = new AbortController();
    try {
      await Promise.race([
        this.temporal.client.withAbortSignal(done.signal, () => handle.getUpdateHandle(`message-${last.turn_id}`).result()).catch(() => undefined),
        new Promise((resolve) => setTimeout(resolve, FINISHING_TURN_WAIT_MS).unref()),
      ]);
    } finally {
      done.abort();
    }
    return true;
  }

  /** Starts a turn; resolves once the session workflow has accepted it (or refused with a 409). */
  async sendMessage(principal: Principal, id: string, content: string, streamChannel?: string, turnId: string = randomUUID()): Promise<AcceptedTurn> {
    const session = await this.visible(principal, id);
    if (Buffer.byteLength(content) > this.config.SVC_AGENT_MAX_MESSAGE_BYTES) {
      throw new AppError('payload_too_large', `A message may hold at most ${this.config.SVC_AGENT_MAX_MESSAGE_BYTES} bytes`, {
        limit: this.config.SVC_AGENT_MAX_MESSAGE_BYTES,
      });
    }
    // Checked before a turn starts: a turn in flight (or resumed by a decision) is never cut.
    if (session.budget_usd !== null) {
      const budget = Number(session.budget_usd);
      const { cost_usd: spent } = await sessionUsage(this.sql, id);
      if (spent >= budget)
        throw conflict('budget_exceeded', `This session has used ${spent} USD of its ${budget} USD budget`, { budget_usd: budget, cost_usd: spent });
    }
    const handle = this.temporal.client.workflow.getHandle(agentSessionWorkflowId(id));
    const args: [AgentMessageArgs] = [{ turnId, content, ...(streamChannel ? { streamChannel } : {}) }];
    const updateId = `message-${turnId}`;
    // A stream needs the acceptance to begin; an answer that waits for the outcome, the outcome only.
    const send = () =>
      streamChannel
        ? acceptedTurn(() => handle.startUpdate(agentMessageUpdate, { args, updateId, waitForStage: 'ACCEPTED' }))
        : this.completedTurn(handle, args, updateId, turnId);
    try {
      return countOutcome(await send(), this.metrics);
    } catch (err) {
      // The turn before was answered from its announcement and its workflow is completing it still:
      // this message waits for that, as if it had been sent a few milliseconds later.
      if (err instanceof AppError && err.code === 'turn_in_progress' && (await this.finishingTurn(id, handle))) return countOutcome(await send(), this.metrics);
      if (!(err instanceof WorkflowNotFoundError)) throw err;
      // The session's workflow is gone (terminated from the Temporal UI, say). The conversation is
      // in PostgreSQL, so a new run carries on; a gate it waited at can no longer be resumed.
      await this.actions.rejectAbandoned({ sessionId: id });
      await this.startWorkflow(id);
      return countOutcome(await send(), this.metrics);
    }
  }
}
