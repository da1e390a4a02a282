import type { ResolvedConnection } from './connection.service.js';
import { EgressDeniedError } from '../platform/egress.js';
import { HttpCallError, httpCall } from './http-call.js';

export interface ProbeResult {
  ok: boolean;
  status?: number;
  error?: string;
  /** The egress policy refused the target: nothing was sent. */
  denied?: boolean;
}

/** One authenticated GET against the connection: its base URL, or the model list of an LLM provider. */
export async function probe(connection: ResolvedConnection, timeoutMs: number): Promise<ProbeResult> {
  const path = connection.type === 'openai' || connection.type === 'anthropic' ? '/models' : '';
  try {
    // Only the status counts: the body is never read, so a huge answer costs nothing.
    const result = await httpCall(connection, { method: 'GET', path }, { timeoutMs, readBody: false });
    if (result.status >= 200 && result.status < 400) return { ok: true, status: result.status };
    const reason = result.status === 401 || result.status === 403 ? 'the target refused the credential' : 'the target answered with an error';
    return { ok: false, status: result.status, error: `HTTP ${result.status}: ${reason}` };
  } catch (err) {
    if (err instanceof EgressDeniedError) return { ok: false, denied: true, error: err.message };
    if (err instanceof HttpCallError) return { ok: false, error: err.message };
    throw err;
  }
}
