/**
 * The one owner of `agent_sessions` and `agent_messages`: a chat session and its conversation
 * (the gate's actions are `AgentActionStore`'s). Nothing else in the service writes these tables.
 */
import type { Principal } from '../auth/auth.service.js';
import type { Sql } from '../db/sql.js';
import type { AuthService } from '../auth/auth.service.js';
import type { UsersService } from '../auth/users.service.js';
import type { AgentActionStatus, AgentApprovalPolicy, AgentToolCall } from '../../workflows/defs.js';
import { MAX_TOKENS_PER_CALL, type ChatMessage } from '../providers/provider.js';

export interface SessionRow {
  id: string;
  owner_id: number;
  owner_login: string;
  provider_id: number;
  provider_type: string;
  model: string;
  system_prompt: string | null;
  approval: AgentApprovalPolicy;
  /** Seconds a pending action waits; null for SVC_AGENT_GATE_TTL. */
  gate_ttl_s: number | null;
  /** numeric comes back as text. */
  budget_usd: string | null;
  created_at: Date | string;
}

/** One gated action as stored: the audit trail of the gate. */
export interface ActionRow {
  action_id: string;
  session_id: string;
  turn_id: string;
  tool_call_id: string;
  tool: string;
  args: Record<string, unknown>;
  edited_args: Record<string, unknown> | null;
  summary: string;
  status: AgentActionStatus;
  note: string | null;
  decided_by: number | null;
  decided_at: Date | string | null;
  started_at: Date | string | null;
  expires_at: Date | string | null;
  outcome: { ok: boolean; result_summary: string } | null;
  outcome_at: Date | string | null;
  created_at: Date | string;
}

/** The decision part of a `decision` message. */
export interface DecisionRecord {
  action_id: string;
  /** Absent on decisions recorded before expiry existed (then `approved` tells). */
  status?: Exclude<AgentActionStatus, 'pending'>;
  approved: boolean;
  note: string | null;
  decided_by: number | null;
  edited_args?: Record<string, unknown>;
}

export interface MessageRow {
  id: string;
  turn_id: string;
  role: 'user' | 'assistant' | 'tool' | 'decision';
  content: string;
  tool_calls: AgentToolCall[] | null;
  tool_call_id: string | null;
  tool_name: string | null;
  args: Record<string, unknown> | null;
  result_summary: string | null;
  decision: DecisionRecord | null;
  telemetry: { tokens_in?: number; tokens_out?: number; cost_usd?: number; wall_ms?: number; error?: { code: string; message: string } } | null;
  created_at: Date | string;
}

/** A new session, before its workflow starts (removed again when the start fails). */
export async function insertSession(
  sql: Sql,
  s: {
    id: string;
    ownerId: number;
    providerId: number;
    providerType: string;
    model: string;
    systemPrompt: string | null;
    approval: AgentApprovalPolicy;
    gateTtlS: number | null;
    budgetUsd: number | null;
  },
): Promise<void> {
  await sql.query(
    'insert into agent_sessions (id, owner_id, provider_id, provider_type, model, system_prompt, approval, gate_ttl_s, budget_usd) values (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    [s.id, s.ownerId, s.providerId, s.providerType, s.model, s.systemPrompt, s.approval, s.gateTtlS, s.budgetUsd],
  );
}

export async function deleteSession(sql: Sql, id: string): Promise<void> {
  await sql.query('delete from agent_sessions where id = ?', [id]);
}

/** Stores one message (insertMessage): a retried activity finds its row by (session, step key). */
const INSERT_MESSAGE = `insert into agent_messages (session_id, step_key, turn_id, role, content, tool_calls, tool_call_id, tool_name, args, result_summary, decision, telemetry)
       values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) on conflict (session_id, step_key) do nothing`;
/** The same, with a notification sent by the statement (its two last parameters: the channel, the payload). */
const INSERT_MESSAGE_ANNOUNCED = `with stored as (${INSERT_MESSAGE} returning 1) select pg_notify(?, ?)`;

/** One message of a conversation, idempotent on (session, step key): a retried activity finds its row. */
export async function insertMessage(
  sql: Sql,
  row: {
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
    decision?: DecisionRecord;
    telemetry?: unknown;
  },
  /** A notification sent by the same statement, delivered once the message is stored. */
  announce?: { channel: string; payload: string },
): Promise<void> {
  await sql.query(
    announce ? INSERT_MESSAGE_ANNOUNCED : INSERT_MESSAGE,
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
      ...(announce ? [announce.channel, announce.payload] : []),
    ],
    { prepared: true },
  );
}

/** The session's last message: its turn, its role and its tool calls. */
export async function lastMessage(sql: Sql, sessionId: string): Promise<Pick<MessageRow, 'turn_id' | 'role' | 'tool_calls'> | undefined> {
  const [row] = await sql.query<Pick<MessageRow, 'turn_id' | 'role' | 'tool_calls'>>(
    'select turn_id, role, tool_calls from agent_messages where session_id = ? order by id desc limit 1',
    [sessionId],
    { prepared: true },
  );
  return row;
}

/** A step's stored message, when an earlier attempt of the activity already wrote it. */
export async function stepMessage<K extends keyof MessageRow>(
  sql: Sql,
  sessionId: string,
  stepKey: string,
  columns: K[],
): Promise<Pick<MessageRow, K> | undefined> {
  // Prepared: each caller names a fixed list of columns.
  const [row] = await sql.query<Pick<MessageRow, K>>(
    `select ${columns.join(', ')} from agent_messages where session_id = ? and step_key = ?`,
    [sessionId, stepKey],
    { prepared: true },
  );
  return row;
}

export async function loadSession(sql: Sql, id: string): Promise<SessionRow | undefined> {
  const [row] = await sql.query<SessionRow>(
    `select s.id, s.owner_id, u.login as owner_login, s.provider_id, s.provider_type, s.model, s.system_prompt,
            s.approval, s.gate_ttl_s, s.budget_usd, s.created_at
     from agent_sessions s join users u on u.id = s.owner_id where s.id = ?`,
    [id],
    { prepared: true },
  );
  return row;
}

/**
 * Tokens and cost of a session so far: the model calls' own telemetry (rows `model:*`), not the
 * closing and error rows, which repeat their turn's totals.
 */
/** A stored token count as SQL: a JSON number rounded into 0..MAX_TOKENS_PER_CALL, anything else 0. */
const SANE_TOKENS = (key: string) =>
  `case when jsonb_typeof(telemetry->'${key}') = 'number' then least(greatest(round((telemetry->>'${key}')::numeric), 0), ${MAX_TOKENS_PER_CALL}) else 0 end`;
/** The most one model call is counted to cost (USD): what MAX_TOKENS_PER_CALL would cost at a dollar a token. */
const MAX_COST_PER_CALL = 2 * MAX_TOKENS_PER_CALL;

export async function sessionUsage(sql: Sql, sessionId: string): Promise<{ tokens_in: number; tokens_out: number; cost_usd: number }> {
  // Counts stored before they were made sane may be any JSON (1.5, 1e308, a string): each is
  // read as tokenCount reads a provider's, so a bad answer once stored cannot break the session.
  const [row] = await sql.query<{ tokens_in: string; tokens_out: string; cost_usd: string }>(
    `select coalesce(sum(${SANE_TOKENS('tokens_in')}), 0) as tokens_in, coalesce(sum(${SANE_TOKENS('tokens_out')}), 0) as tokens_out,
            coalesce(sum(case when jsonb_typeof(telemetry->'cost_usd') = 'number' then least(greatest((telemetry->>'cost_usd')::numeric, 0), ${MAX_COST_PER_CALL}) end), 0) as cost_usd
       from agent_messages where session_id = ? and step_key like 'model:%' and telemetry is not null`,
    [sessionId],
  );
  return { tokens_in: Number(row!.tokens_in), tokens_out: Number(row!.tokens_out), cost_usd: Math.round(Number(row!.cost_usd) * 1e6) / 1e6 };
}

export async function loadMessages(sql: Sql, sessionId: string): Promise<MessageRow[]> {
  return sql.query<MessageRow>('select * from agent_messages where session_id = ? order by id', [sessionId]);
}

/** The conversation as the model sees it: decisions and provider errors are history, not context. */
export async function loadHistory(sql: Sql, sessionId: string): Promise<ChatMessage[]> {
  const out: ChatMessage[] = [];
  for (const row of await loadMessages(sql, sessionId)) {
    if (row.role === 'user') out.push({ role: 'user', content: row.content });
    else if (row.role === 'tool') out.push({ role: 'tool', toolCallId: row.tool_call_id ?? '', name: row.tool_name ?? '', content: row.content });
    else if (row.role === 'assistant' && !row.telemetry?.error) out.push({ role: 'assistant', content: row.content, toolCalls: row.tool_calls ?? [] });
  }
  return out;
}

/** The session owner with their current role: tools act with exactly their capabilities. */
export async function ownerOf(
  ports: { users: Pick<UsersService, 'byId'>; auth: Pick<AuthService, 'principal'> },
  ownerId: number,
): Promise<Principal | undefined> {
  const user = await ports.users.byId(ownerId);
  return user ? ports.auth.principal(user, 'app_password') : undefined;
}
