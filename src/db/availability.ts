/**
 * Errors that mean PostgreSQL cannot be reached right now, as opposed to a problem with the
 * statement: refused or broken connections, a server shutting down or starting up, a pool that
 * could not hand out a connection in time.
 */
const unavailableCodes = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENOTFOUND',
  '57P01',
  '57P02',
  '57P03',
  '08006',
  '08001',
  '08003',
  '08004',
]);

export function isDatabaseUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; name?: unknown; message?: unknown } | undefined;
  if (!e || typeof e !== 'object') return false;
  if (typeof e.code === 'string' && unavailableCodes.has(e.code)) return true;
  if (e.name === 'KnexTimeoutError') return true;
  // node-postgres reports a socket closed under a query without a code.
  return typeof e.message === 'string' && /^Connection terminated|^Client has encountered a connection error|^Connection ended/.test(e.message);
}

/**
 * Runs `fn`, and again with backoff while it fails because PostgreSQL cannot be reached, until
 * `deadline` (epoch ms) passes; `onWait` is called before each wait (to heartbeat). Only for
 * idempotent work: a connection lost in the middle of a statement may still have committed it.
 */
export async function waitOutDatabase<T>(fn: () => Promise<T>, deadline: number, onWait?: () => void): Promise<T> {
  for (let delay = 200; ; delay = Math.min(delay * 2, 2000)) {
    try {
      return await fn();
    } catch (err) {
      if (!isDatabaseUnavailable(err) || Date.now() + delay > deadline) throw err;
      onWait?.();
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}
