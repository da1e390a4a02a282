import type { Knex } from '@mikro-orm/knex';

interface PgConnection {
  query(config: { text: string; values: unknown[]; name?: string }): Promise<{ rows: unknown[] }>;
}

/**
 * Runs one SQL statement (`$1` placeholders) on a connection of the ORM's pool, without the
 * query builder and query logging layers in between. Only for hot paths where a few tens of
 * microseconds per request matter (licence verify and the rate limiter); everything else goes
 * through the ORM. Timestamps come back as text, as the ORM's driver configures them.
 *
 * With `name`, the statement is prepared once per pooled connection and then only executed,
 * which spares PostgreSQL parsing and planning it on every call. A name must always go with
 * the same text.
 */
export async function directQuery<T>(knex: Knex, text: string, values: unknown[], name?: string): Promise<T[]> {
  const client = knex.client as unknown as { acquireConnection(): Promise<PgConnection>; releaseConnection(c: PgConnection): Promise<unknown> };
  const connection = await client.acquireConnection();
  try {
    return (await connection.query({ text, values, ...(name ? { name } : {}) })).rows as T[];
  } finally {
    await client.releaseConnection(connection);
  }
}
