import { createHash } from 'node:crypto';
import type { Knex } from '@mikro-orm/knex';
import pg from 'pg';
import { SpanKind, inSpan, tracingActive } from '../platform/tracing.js';

/**
 * The service's one plain-SQL helper, beside MikroORM (which models the service's own tables):
 * queries the ORM does not model (the execution mirror, record tables built from entity
 * definitions at run time, hot paths such as licence verify), on connections of the ORM's pool,
 * so the service keeps one pool. Values always travel as bound parameters, never in the text.
 */

/** What a query may carry beside its text and values. */
export interface QueryOptions {
  /**
   * Prepares the statement once per pooled connection and then only executes it: no parse and
   * plan of its text at every call, which on a webhook's path is about half of PostgreSQL's work
   * per request. For the hot, fixed statements of the code (a record table's changing texts are
   * not), and only those that name their columns (no `select *` of a table). PostgreSQL refuses a
   * prepared statement that a migration made stale (the shape of its answer, or a type it inferred
   * for a parameter, changed) or that the session forgot: `query` prepares it again and runs it
   * once more, and a transaction in which that happens runs again once (the rollback undid its
   * work), so a transaction using one must do nothing outside the database.
   */
  prepared?: boolean;
}

/** Something to run statements on: the pool, or one transaction's connection. */
export interface Queryable {
  query<T = Record<string, unknown>>(text: string, params?: unknown[], options?: QueryOptions): Promise<T[]>;
}

export interface Transaction extends Queryable {
  /** Runs `fn` inside a savepoint: its failure rolls back only its own work, then rethrows. */
  savepoint<T>(fn: () => Promise<T>): Promise<T>;
}

/** How column values of some PostgreSQL types are read (pg's `types` option). */
export type RowTypes = Record<number, (value: string) => unknown>;

interface PgClient {
  query(config: pg.QueryConfig): Promise<{ rows: unknown[] }>;
  query(text: string): Promise<unknown>;
  /** pg's record of the statements this connection has prepared, by name (what it parses no more). */
  connection?: { parsedStatements?: Record<string, string> };
}

/**
 * What PostgreSQL answers when a statement this connection prepared is stale or gone: 26000, the
 * session no longer holds it (something ran DEALLOCATE ALL or DISCARD ALL on the connection, as a
 * pooler in front of PostgreSQL may); 0A000, a migration changed the shape of its answer ("cached
 * plan must not change result type"; matched by code alone, its text is translated); 42804,
 * 42883, 22003, a migration changed the type of a column a parameter was compared with or
 * written to, and the type PostgreSQL inferred for the parameter when the statement was prepared
 * no longer fits. Preparing it again settles each; a genuine error of these kinds comes back the
 * same and is thrown then.
 */
const STALE_CODES = new Set(['26000', '0A000', '42804', '42883', '22003']);
const staleCode = (err: unknown): string | undefined => {
  const code = typeof err === 'object' && err !== null ? (err as { code?: unknown }).code : undefined;
  return typeof code === 'string' && STALE_CODES.has(code) ? code : undefined;
};

/**
 * Makes the connection prepare a statement again at its next use. A session that forgot one
 * (26000) may have forgotten them all: every statement it prepared is dropped (only this helper
 * prepares statements on the pool's connections), so that none is refused in turn afterwards.
 */
async function forget(client: PgClient, name: string, code: string): Promise<void> {
  const parsed = client.connection?.parsedStatements;
  if (code === '26000') {
    await client.query('deallocate all');
    if (parsed) for (const key of Object.keys(parsed)) delete parsed[key];
    return;
  }
  await client.query(`deallocate ${name}`).catch((err: unknown) => {
    if (staleCode(err) !== '26000') throw err;
  });
  if (parsed) delete parsed[name];
}

/** Forgets the statements a transaction found stale (name -> code): false when one could not be. */
async function forgetAll(client: PgClient, stale: Map<string, string>): Promise<boolean> {
  try {
    for (const [name, code] of stale) await forget(client, name, code);
    return true;
  } catch {
    return false;
  }
}

/**
 * `?` placeholders become `$1..$n` (outside quoted literals); a text already written with `$n`
 * placeholders is left as it is. (MikroORM's `execute` inlines escaped values instead, which also
 * breaks array parameters.)
 */
export function numberPlaceholders(text: string): string {
  return text.includes('?') ? statementText(text).numbered : text;
}

/** A prepared statement's name: from its text, so one name never goes with two texts. */
function statementName(text: string, known = statementText(text)): string {
  return (known.name ??= `svc_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`);
}

/** What is derived from a statement's text: its numbered form, and its name once it is prepared. */
interface StatementText {
  numbered: string;
  name?: string;
}

/**
 * The code's statement texts, each numbered (and named) once, not at every call: a few hundred
 * (record tables add some); once full the cache starts again rather than grow. Long texts (a bulk
 * insert's rows) are numbered each time, not kept.
 */
function statementText(text: string): StatementText {
  if (text.length > TEXT_MAX_CHARS) return { numbered: numberEach(text) };
  let known = statementTexts.get(text);
  if (known === undefined) {
    if (statementTexts.size >= TEXTS_KEPT) statementTexts.clear();
    known = { numbered: text.includes('?') ? numberEach(text) : text };
    statementTexts.set(text, known);
  }
  return known;
}
const statementTexts = new Map<string, StatementText>();
const TEXTS_KEPT = 500;
const TEXT_MAX_CHARS = 8192;

function numberEach(text: string): string {
  let n = 0;
  let out = '';
  let quoted = false;
  for (const ch of text) {
    if (ch === "'") quoted = !quoted;
    out += ch === '?' && !quoted ? `$${++n}` : ch;
  }
  return out;
}

export class Sql implements Queryable {
  private readonly types?: { getTypeParser: (oid: number, format?: 'text' | 'binary') => unknown };

  constructor(
    private readonly knex: Knex,
    rowTypes?: RowTypes,
  ) {
    if (rowTypes) this.types = { getTypeParser: (oid, format) => rowTypes[oid] ?? pg.types.getTypeParser(oid, format ?? 'text') };
  }

  /** The same pool, reading values of some types differently (records read dates as text, say). */
  withRowTypes(rowTypes: RowTypes): Sql {
    return new Sql(this.knex, rowTypes);
  }

  private run<T>(client: PgClient, text: string, params: unknown[], options?: QueryOptions): Promise<T[]> {
    const known = statementText(text);
    const config = {
      text: known.numbered,
      values: params,
      ...(options?.prepared ? { name: statementName(text, known) } : {}),
      ...(this.types ? { types: this.types } : {}),
    };
    // A span per statement when tracing is on (its text holds placeholders only, never values).
    if (!tracingActive()) return client.query(config as pg.QueryConfig).then((result) => result.rows as T[]);
    const verb = /^\s*(\w+)/.exec(config.text)?.[1]?.toUpperCase() ?? 'query';
    const attributes = { 'db.system': 'postgresql', 'db.statement': config.text.slice(0, 2000) };
    return inSpan(`SQL ${verb}`, attributes, () => client.query(config as pg.QueryConfig).then((result) => result.rows as T[]), SpanKind.CLIENT);
  }

  async query<T = Record<string, unknown>>(text: string, params: unknown[] = [], options?: QueryOptions): Promise<T[]> {
    const client = (await this.knex.client.acquireConnection()) as PgClient;
    try {
      try {
        return await this.run<T>(client, text, params, options);
      } catch (err) {
        const code = options?.prepared ? staleCode(err) : undefined;
        if (!code) throw err;
        // Made stale by a migration, or forgotten by the session: prepared again, once.
        await forget(client, statementName(text), code);
        return await this.run<T>(client, text, params, options);
      }
    } finally {
      await this.knex.client.releaseConnection(client);
    }
  }

  /**
   * Runs `fn` in one transaction on one connection: committed when it returns, rolled back when it
   * throws. When a prepared statement in it was refused as stale (see QueryOptions.prepared), the
   * transaction, rolled back, runs once more with the statement prepared again.
   */
  async transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
    const client = (await this.knex.client.acquireConnection()) as PgClient;
    try {
      const stale = new Map<string, string>();
      try {
        const result = await this.inTransaction(client, fn, stale);
        // Refused and handled inside (a savepoint caught it): prepared again at its next use.
        await forgetAll(client, stale);
        return result;
      } catch (err) {
        if (!stale.size || !(await forgetAll(client, stale))) throw err;
      }
      const again = new Map<string, string>();
      try {
        return await this.inTransaction(client, fn, again);
      } finally {
        await forgetAll(client, again);
      }
    } finally {
      await this.knex.client.releaseConnection(client);
    }
  }

  /** One run of a transaction's function; `stale` collects the prepared statements refused as stale in it. */
  private async inTransaction<T>(client: PgClient, fn: (tx: Transaction) => Promise<T>, stale: Map<string, string>): Promise<T> {
    let savepoints = 0;
    const tx: Transaction = {
      query: <R>(text: string, params: unknown[] = [], options?: QueryOptions) =>
        this.run<R>(client, text, params, options).catch((err: unknown) => {
          const code = options?.prepared ? staleCode(err) : undefined;
          if (code) stale.set(statementName(text), code);
          throw err;
        }),
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
    }
  }
}

/** MikroORM's pool returns timestamps as text; this reads either form. */
export const toDate = (value: Date | string) => (value instanceof Date ? value : new Date(value));
export const toIso = (value: Date | string | null | undefined) => (value === null || value === undefined ? null : toDate(value).toISOString());
