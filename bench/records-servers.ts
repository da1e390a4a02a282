import type { Server } from 'node:http';
import Koa from 'koa';
import pg from 'pg';
import { loadConfig } from '../src/config.js';
import { buildApp } from '../src/http/app.js';
import { KeyRing, parseMasterKey } from '../src/platform/crypto.js';
import { createLogger } from '../src/platform/logger.js';
import { compileEql } from '../src/records/eql.compiler.js';
import { parseEql } from '../src/records/eql.parser.js';
import { qualifiedTable } from '../src/records/naming.js';
import { allColumns, orderBy, selectList } from '../src/records/record-query.js';
import { createServices } from '../src/services.js';

/**
 * The server side of the records benchmark, run in a child process: the real API and, beside
 * it, a bare Koa app that runs the same SQL straight through `pg`. The SQL text is built once
 * at start-up from the same records modules, so both sides send PostgreSQL identical statements.
 */

export const ITEM = 'bench_item';
export const COMPANY = 'bench_company';
export const FILTER = 'age = 42';
export const SORT = 'seen_at:desc';
export const INSERT_COLUMNS = ['name', 'email', 'age', 'score', 'active', 'stage', 'born_on', 'seen_at', 'company'];

function listen(app: Koa): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
    server.once('error', reject);
    server.keepAliveTimeout = 65_000;
  });
}

const url = (server: Server) => {
  const address = server.address();
  return `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
};

async function readJson(req: NodeJS.ReadableStream): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

/** Starts both servers, prints their addresses as one JSON line, and returns how to stop them. */
export async function serve(): Promise<{ stop(): Promise<void> }> {
  const databaseUrl = process.env.BENCH_DATABASE_URL!;
  const key = process.env.BENCH_KEY!;
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    SVC_ENCRYPTION_KEY: key,
    TEMPORAL_ADDRESS: '127.0.0.1:1',
    LOG_LEVEL: 'silent',
    HOST: '127.0.0.1',
    PORT: '0',
  });
  const services = await createServices(config, createLogger('silent'), new KeyRing(parseMasterKey(key)), { databaseUrl, temporalAddress: '127.0.0.1:1' });
  const ours = await listen(buildApp(services).app);

  const item = (await services.entities.require(ITEM)).definition;
  const company = (await services.entities.require(COMPANY)).definition;
  const filter = compileEql(FILTER, parseEql(FILTER), { entity: item, alias: 't', related: () => company });
  const from = `from ${qualifiedTable(ITEM)} t where ${filter.sql}`;
  const n = filter.params.length;
  const pageSql = `select ${selectList(allColumns(item), 't')} ${from} order by ${orderBy(item, SORT, 't')} limit $${n + 1} offset $${n + 2}`;
  const countSql = `select count(*)::int as n ${from}`;
  const includeSql = `select ${selectList(allColumns(company), 'r')} from ${qualifiedTable(COMPANY)} r where r."uuid" = any($1::uuid[])`;
  const insertSql =
    `insert into ${qualifiedTable(ITEM)} as t (${INSERT_COLUMNS.map((c) => `"${c}"`).join(', ')}) ` +
    `values (${INSERT_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')}) returning ${selectList(allColumns(item), 't')}`;

  const pool = new pg.Pool({ connectionString: databaseUrl, max: 20 });
  const baseline = new Koa();
  baseline.use(async (ctx) => {
    if (ctx.path === '/ping') {
      ctx.body = { status: 'ok', data: { pong: true } };
    } else if (ctx.path === '/list') {
      const perPage = Number(ctx.query.per_page ?? 50);
      const [page, count] = await Promise.all([pool.query(pageSql, [...filter.params, perPage, 0]), pool.query(countSql, filter.params)]);
      const items = page.rows as Record<string, unknown>[];
      if (ctx.query.include === 'company') {
        const ids = [...new Set(items.map((r) => r.company).filter((v): v is string => typeof v === 'string'))];
        const related = await pool.query(includeSql, [ids]);
        const byId = new Map(related.rows.map((r) => [r.uuid, r]));
        for (const row of items) row.company = byId.get(row.company as string) ?? null;
      }
      ctx.body = { status: 'ok', data: { items, total: count.rows[0].n, page: 1, per_page: perPage } };
    } else if (ctx.path === '/bulk' && ctx.method === 'POST') {
      const operations = (await readJson(ctx.req)) as { fields: Record<string, unknown> }[];
      const client = await pool.connect();
      try {
        await client.query('begin');
        const results = [];
        for (const [index, op] of operations.entries()) {
          await client.query('savepoint sp');
          const { rows } = await client.query(
            insertSql,
            INSERT_COLUMNS.map((c) => op.fields[c] ?? null),
          );
          await client.query('release savepoint sp');
          results.push({ index, op: 'create', status: 'ok', uuid: rows[0].uuid });
        }
        await client.query('commit');
        ctx.body = { status: 'ok', data: { results, ok: results.length, failed: 0 } };
      } finally {
        client.release();
      }
    } else ctx.status = 404;
  });
  const bare = await listen(baseline);
  process.stdout.write(`${JSON.stringify({ ours: url(ours), baseline: url(bare), sql: { pageSql, countSql, includeSql, insertSql } })}\n`);
  return {
    async stop() {
      for (const server of [ours, bare]) {
        server.close();
        server.closeAllConnections();
      }
      await Promise.all([pool.end(), services.orm.close(true)]);
    },
  };
}
