import { randomUUID } from 'node:crypto';
import { WorkflowUpdateFailedError, type WorkflowUpdateHandle } from '@temporalio/client';
import { ApplicationFailure, WorkflowNotFoundError } from '@temporalio/common';
import type { Principal } from '../auth/auth.service.js';
import type { Config } from '../config.js';
import type { ConnectionService } from '../connections/connection.service.js';
import type { Sql } from '../db/sql.js';
import { toIso } from '../db/sql.js';
import { AppError, conflict, invalidRequest, notFound } from '../platform/errors.js';
import type { TemporalHandle } from '../temporal/connection.js';
import { agentDecisionUpdate, agentMessageUpdate } from '../../workflows/agent.updates.js';
import { AGENT_REJECTIONS, AGENT_SESSION_WORKFLOW, agentSessionWorkflowId, type AgentSessionInput, type AgentTurnOutcome } from '../../workflows/defs.js';
import { hasPrice } from './agent.pricing.js';
import { loadMessages, loadSession, type SessionRow } from './agent.store.js';
import { MODEL_CONNECTION_TYPES } from './providers/index.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

interface ActionRow {
  action_id: string;
  session_id: string;
  tool: string;
  args: Record<string, unknown>;
  summary: string;
  status: 'pending' | 'approved' | 'rejected';
}

/** A turn the workflow accepted; `outcome` settles when the turn reaches its next outcome. */
export interface AcceptedTurn {
  outcome: Promise<AgentTurnOutcome>;
}

/** Sessions, messages and decisions: the API side of the chat agent (the turn itself runs in Temporal). */
export class AgentService {
  constructor(
    private readonly sql: Sql,
    private readonly connections: ConnectionService,
    private readonly temporal: TemporalHandle,
    private readonly config: Config,
  ) {}

  async createSession(principal: Principal, input: { provider_id: number; model_id: string; system_prompt_override?: string | undefined }): Promise<{ session_id: string }> {
    const connection = await this.connections.get(input.provider_id).catch((err: unknown) => {
      if (err instanceof AppError && err.status === 404) throw invalidRequest(`provider_id ${input.provider_id} is not a connection`, { field: 'provider_id' });
      throw err;
    });
    if (!(MODEL_CONNECTION_TYPES as readonly string[]).includes(connection.type)) {
      throw invalidRequest(`provider_id ${input.provider_id} is a connection of type ${connection.type}; a model provider is of type openai or anthropic`, { field: 'provider_id' });
    }
    const id = randomUUID();
    await this.sql.query('insert into agent_sessions (id, owner_id, provider_id, provider_type, model, system_prompt) values (?, ?, ?, ?, ?, ?)', [
      id,
      principal.id,
      connection.id,
      connection.type,
      input.model_id,
      input.system_prompt_override ?? null,
    ]);
    try {
      await this.startWorkflow(id);
    } catch (err) {
      await this.sql.query('delete from agent_sessions where id = ?', [id]);
      throw err;
    }
    return { session_id: id };
  }

  private async startWorkflow(id: string): Promise<void> {
    await this.temporal.client.workflow.start(AGENT_SESSION_WORKFLOW, {
      workflowId: agentSessionWorkflowId(id),
      taskQueue: this.temporal.taskQueue,
      args: [{ sessionId: id, maxModelCalls: this.config.SVC_AGENT_MAX_MODEL_CALLS, updatesPerRun: this.config.SVC_AGENT_UPDATES_PER_RUN } satisfies AgentSessionInput],
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
    const [pending] = await this.sql.query<ActionRow>(`select * from agent_actions where session_id = ? and status = 'pending' order by created_at limit 1`, [id]);
    const totals = { tokens_in: 0, tokens_out: 0, cost_usd: 0 };
    for (const m of messages) {
      if (m.role !== 'assistant' || !m.telemetry || m.telemetry.error) continue;
      totals.tokens_in += m.telemetry.tokens_in ?? 0;
      totals.tokens_out += m.telemetry.tokens_out ?? 0;
      totals.cost_usd += m.telemetry.cost_usd ?? 0;
    }
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
      totals: { ...totals, cost_usd: Math.round(totals.cost_usd * 1e6) / 1e6 },
      price_known: priceKnown,
      ...(priceKnown ? {} : { price_note: `No price is configured for ${session.model} (SVC_AGENT_PRICES); its cost counts as 0` }),
      pending_action: pending ? { action_id: pending.action_id, tool: pending.tool, args: pending.args, summary: pending.summary } : null,
      messages: messages.map((m, index) => ({
        seq: index + 1,
        role: m.role,
        content: m.content,
        ...(m.tool_calls?.length ? { tool_calls: m.tool_calls.map((c) => ({ id: c.id, name: c.name, args: c.args })) } : {}),
        ...(m.tool_name ? { tool: m.tool_name } : {}),
        ...(m.args ? { args: m.args } : {}),
        ...(m.result_summary !== null ? { result_summary: m.result_summary } : {}),
        ...(m.decision ? { decision: m.decision } : {}),
        ...(m.telemetry ? { telemetry: m.telemetry } : {}),
        created_at: toIso(m.created_at)!,
      })),
    };
  }

  /** Starts a turn; resolves once the session workflow has accepted it (or refused with a 409). */
  async sendMessage(principal: Principal, id: string, content: string, streamChannel?: string, turnId: string = randomUUID()): Promise<AcceptedTurn> {
    await this.visible(principal, id);
    if (Buffer.byteLength(content) > this.config.SVC_AGENT_MAX_MESSAGE_BYTES) {
      throw new AppError(413, 'payload_too_large', `A message may hold at most ${this.config.SVC_AGENT_MAX_MESSAGE_BYTES} bytes`, { limit: this.config.SVC_AGENT_MAX_MESSAGE_BYTES });
    }
    const handle = this.temporal.client.workflow.getHandle(agentSessionWorkflowId(id));
    const send = () =>
      this.accepted(() =>
        handle.startUpdate(agentMessageUpdate, { args: [{ turnId, content, ...(streamChannel ? { streamChannel } : {}) }], updateId: `message-${turnId}`, waitForStage: 'ACCEPTED' }),
      );
    try {
      return await send();
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
      // The session's workflow is gone (terminated from the Temporal UI, say). The conversation is
      // in PostgreSQL, so a new run carries on; a gate it waited at can no longer be resumed.
      await this.sql.query(
        `update agent_actions set status = 'rejected', note = 'The session restarted before a decision', decided_at = now() where session_id = ? and status = 'pending'`,
        [id],
      );
      await this.startWorkflow(id);
      return send();
    }
  }

  /** Decides a pending action once (a row claim, so two API processes cannot both decide it). */
  async decide(principal: Principal, actionId: string, approved: boolean, note: string | undefined, streamChannel?: string): Promise<AcceptedTurn> {
    const [action] = UUID.test(actionId) ? await this.sql.query<ActionRow>('select * from agent_actions where action_id = ?', [actionId]) : [];
    if (!action) throw notFound('Action');
    await this.visible(principal, action.session_id).catch(() => {
      throw notFound('Action');
    });
    const claimed = await this.sql.query(
      `update agent_actions set status = ?, note = ?, decided_by = ?, decided_at = now() where action_id = ? and status = 'pending' returning action_id`,
      [approved ? 'approved' : 'rejected', note ?? null, principal.id, actionId],
    );
    if (!claimed.length) throw conflict('action_already_decided', `Action ${actionId} was already ${action.status}`, { status: action.status });
    const handle = this.temporal.client.workflow.getHandle(agentSessionWorkflowId(action.session_id));
    try {
      return await this.accepted(() =>
        handle.startUpdate(agentDecisionUpdate, {
          args: [{ actionId, approved, decidedBy: principal.id, ...(note !== undefined ? { note } : {}), ...(streamChannel ? { streamChannel } : {}) }],
          updateId: `decision-${actionId}`,
          waitForStage: 'ACCEPTED',
        }),
      );
    } catch (err) {
      // The workflow did not take the decision: the action stays decidable.
      await this.sql.query(`update agent_actions set status = 'pending', note = null, decided_by = null, decided_at = null where action_id = ?`, [actionId]);
      throw err;
    }
  }

  /**
   * Starts an update and waits until the workflow accepted it. A refusal by the update's validator
   * comes back with the start call itself, so the outcome promise settles at once; the short race
   * below catches that before a caller commits to an answer (an event stream's headers). A refusal
   * is translated into the API's 409 codes.
   */
  private async accepted(start: () => Promise<WorkflowUpdateHandle<AgentTurnOutcome>>): Promise<AcceptedTurn> {
    const handle = await start().catch((err: unknown) => {
      throw refusal(err);
    });
    const outcome = handle.result().catch((err: unknown) => {
      throw refusal(err);
    });
    outcome.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const early = await Promise.race([outcome.then(() => 'settled', () => 'refused'), new Promise((resolve) => (timer = setTimeout(() => resolve('running'), 10)))]);
    clearTimeout(timer);
    if (early === 'refused') await outcome;
    return { outcome };
  }
}

/** The session workflow's validator refusals as 409s; anything else unchanged. */
function refusal(err: unknown): unknown {
  const cause = err instanceof WorkflowUpdateFailedError ? err.cause : undefined;
  if (cause instanceof ApplicationFailure && (AGENT_REJECTIONS as readonly string[]).includes(cause.type ?? '')) {
    if (cause.type === 'action_not_pending') return conflict('action_already_decided', cause.message);
    return conflict(cause.type!, cause.message);
  }
  return err;
}

/** The response data of a turn outcome, as SPEC section 2 shapes it; a provider failure is a 502. */
export function outcomeData(outcome: AgentTurnOutcome) {
  if (outcome.outcome === 'answered') {
    return { outcome: 'answered' as const, assistant_message: outcome.assistant_message, tools_called: outcome.tools_called, telemetry: outcome.telemetry };
  }
  if (outcome.outcome === 'gate_pending') return { outcome: 'gate_pending' as const, pending_action: outcome.pending_action };
  const status = outcome.error.code === 'not_found' ? 404 : 502;
  throw new AppError(status, outcome.error.code, outcome.error.message, { tools_called: outcome.tools_called, telemetry: outcome.telemetry });
}
