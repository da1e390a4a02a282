import type { Principal } from '../auth/auth.service.js';
import type { Sql } from '../db/sql.js';
import type { Services } from '../services.js';
import type { AgentToolCall } from '../../workflows/defs.js';
import type { ChatMessage } from './providers/index.js';

export interface SessionRow {
  id: string;
  owner_id: number;
  owner_login: string;
  provider_id: number;
  provider_type: string;
  model: string;
  system_prompt: string | null;
  created_at: Date | string;
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
  decision: { action_id: string; approved: boolean; note: string | null; decided_by: number } | null;
  telemetry: { tokens_in?: number; tokens_out?: number; cost_usd?: number; wall_ms?: number; error?: { code: string; message: string } } | null;
  created_at: Date | string;
}

export async function loadSession(sql: Sql, id: string): Promise<SessionRow | undefined> {
  const [row] = await sql.query<SessionRow>(
    `select s.id, s.owner_id, u.login as owner_login, s.provider_id, s.provider_type, s.model, s.system_prompt, s.created_at
     from agent_sessions s join users u on u.id = s.owner_id where s.id = ?`,
    [id],
  );
  return row;
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
export async function ownerOf(services: Services, ownerId: number): Promise<Principal | undefined> {
  const [user] = await services.sql.query<{ id: number; login: string; role: string }>('select id, login, role from users where id = ?', [ownerId]);
  return user ? services.auth.principal(user, 'app_password') : undefined;
}
