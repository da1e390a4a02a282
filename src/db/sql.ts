import type { Knex } from '@mikro-orm/knex';

interface PgClient {
  query(text: string, params?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

/**
 * `?` placeholders become `$1..$n` (outside quoted literals), so values always travel as bound
 * parameters: arrays as PostgreSQL arrays, never spliced into the SQL text. (MikroORM's
 * `execute` inlines escaped values instead, which also breaks array parameters.)
 */
export function numberPlaceholders(text: string): string {
  let n = 0;
  let out = '';
  let quoted = false;
  for (const ch of text) {
    if (ch === "'") quoted = !quoted;
    out += ch === '?' && !quoted ? `$${++n}` : ch;
  }
  return out;
}

/** Plain SQL with bound parameters on the ORM's connection pool. */
export class Sql {
  constructor(private readonly knex: Knex) {}

  async query<T = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
    const client = (await this.knex.client.acquireConnection()) as PgClient;
    try {
      return (await client.query(numberPlaceholders(text), params)).rows as T[];
    } finally {
      await this.knex.client.releaseConnection(client);
    }
  }

  /** Runs `fn` in one transaction on one connection; rolls back when it throws. */
  async transaction<T>(fn: (tx: { query: Sql['query'] }) => Promise<T>): Promise<T> {
    const client = (await this.knex.client.acquireConnection()) as PgClient;
    const query = async <R>(text: string, params: unknown[] = []) => (await client.query(numberPlaceholders(text), params)).rows as R[];
    try {
      await client.query('begin');
      const result = await fn({ query });
      await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      await this.knex.client.releaseConnection(client);
    }
  }
}

/** MikroORM's pool returns timestamps as text; this reads either form. */
export const toDate = (value: Date | string) => (value instanceof Date ? value : new Date(value));
export const toIso = (value: Date | string | null | undefined) => (value === null || value === undefined ? null : toDate(value).toISOString());
