import type { Knex } from '@mikro-orm/knex';
import pg from 'pg';

/**
 * Raw SQL access for record tables, which are not ORM entities: their columns come from entity
 * definitions at run time. Connections come from the ORM's pool, so the service keeps one pool.
 */

export interface Sql {
  query<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]>;
}

export interface Transaction extends Sql {
  /** Runs `fn` inside a savepoint: its failure rolls back only its own work, then rethrows. */
  savepoint<T>(fn: () => Promise<T>): Promise<T>;
}

const timestamptz = pg.types.getTypeParser(1184, 'text') as (value: string) => Date;
// Record values as JSON wants them: bigint as a number (the JSON Schema keeps it safe), a date as
// its 'YYYY-MM-DD' text (pg would make a local-midnight Date), a timestamp as ISO 8601 UTC.
const parsers: Record<number, (value: string) => unknown> = {
  20: (value) => Number(value),
  1082: (value) => value,
  1184: (value) => timestamptz(value).toISOString(),
};
const types = {
  getTypeParser: (oid: number, format?: 'text' | 'binary') => parsers[oid] ?? pg.types.getTypeParser(oid, format ?? 'text'),
};

async function run<T>(client: pg.ClientBase, text: string, values: unknown[] = []): Promise<T[]> {
  const result = await client.query({ text, values, types } as pg.QueryConfig);
  return result.rows as T[];
}

export class RecordsDatabase implements Sql {
  constructor(private readonly knex: Knex) {}

  private acquire(): Promise<pg.ClientBase> {
    return this.knex.client.acquireConnection() as Promise<pg.ClientBase>;
  }

  private release(client: pg.ClientBase): void {
    void this.knex.client.releaseConnection(client);
  }

  async query<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]> {
    const client = await this.acquire();
    try {
      return await run<T>(client, text, values);
    } finally {
      this.release(client);
    }
  }

  /** Runs `fn` in one transaction on one connection: committed when it returns, rolled back when it throws. */
  async transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
    const client = await this.acquire();
    let savepoints = 0;
    const tx: Transaction = {
      query: (text, values) => run(client, text, values),
      async savepoint(inner) {
        const name = `sp_${++savepoints}`;
        await client.query(`savepoint ${name}`);
        try {
          const result = await inner();
          await client.query(`release savepoint ${name}`);
          return result;
        } catch (err) {
          await client.query(`rollback to savepoint ${name}`);
          throw err;
        }
      },
    };
    try {
      await client.query('begin');
      const result = await fn(tx);
      await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    } finally {
      this.release(client);
    }
  }
}
