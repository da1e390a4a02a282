import type { Queryable } from '../db/sql.js';

/**
 * The one owner of `idempotency_keys` (what a key answers: docs in idempotency.ts). The key and
 * its execution are written in the caller's transaction, under a transaction-scoped advisory lock
 * on (workflow, key), so two calls with one key are answered one after the other. Nothing else in
 * the service writes this table.
 */

/** Serialises the calls carrying one key on one workflow, to the end of the caller's transaction. */
export async function lockIdempotencyKey(tx: Queryable, workflowId: number, key: string): Promise<void> {
  await tx.query('select pg_advisory_xact_lock(hashtext(?))', [`idempotency:${workflowId}:${key}`]);
}

/** The key's first call, while it is remembered (`ttlHours`). */
export async function findIdempotencyKey<Request>(
  tx: Queryable,
  workflowId: number,
  key: string,
  ttlHours: number,
): Promise<{ execution_id: string; fingerprint: string; request: Request } | undefined> {
  const [row] = await tx.query<{ execution_id: string; fingerprint: string; request: Request }>(
    `select execution_id, fingerprint, request from idempotency_keys where workflow_id = ? and key = ? and created_at > now() - (? * interval '1 hour')`,
    [workflowId, key, ttlHours],
  );
  return row;
}

/** Forgets an expired key before it is used again. */
export async function forgetIdempotencyKey(tx: Queryable, workflowId: number, key: string): Promise<void> {
  await tx.query('delete from idempotency_keys where workflow_id = ? and key = ?', [workflowId, key]);
}

export async function rememberIdempotencyKey(
  tx: Queryable,
  row: { workflowId: number; key: string; fingerprint: string; executionId: number; request: unknown },
): Promise<void> {
  await tx.query('insert into idempotency_keys (workflow_id, key, fingerprint, execution_id, request) values (?, ?, ?, ?, ?)', [
    row.workflowId,
    row.key,
    row.fingerprint,
    row.executionId,
    JSON.stringify(row.request),
  ]);
}

/** Drops keys older than `ttlHours` (the worker's sweep). */
export async function purgeIdempotencyKeys(sql: Queryable, ttlHours: number): Promise<void> {
  await sql.query(`delete from idempotency_keys where created_at < now() - (? * interval '1 hour')`, [ttlHours]);
}
