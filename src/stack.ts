import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import { join, resolve } from 'node:path';
import pg from 'pg';
import type { Config } from './config.js';
import { ConfigError } from './config.js';
import { waitOutDatabase } from './db/availability.js';
import { migrate } from './db/orm.js';
import { buildApp } from './http/app.js';
import { answerClientErrors } from './http/client-errors.js';
import { KeyRing, generateMasterKey, parseMasterKey } from './platform/crypto.js';
import { EmbeddedPostgres, ensureRunAsUser } from './platform/embedded-postgres.js';
import { makeDataDirPrivate } from './platform/data-dir.js';
import { mask, type Logger } from './platform/logger.js';
import { TemporalDevServer, provisionTemporalCli } from './platform/temporal-server.js';
import { closeServices, createServices, useEagerClient, type Services } from './services.js';
import { EncryptionCodec } from './temporal/codec.js';
import { startLoopbackCodec } from './temporal/codec.listener.js';
import { startWorker, type RunningWorker } from './temporal/worker.js';
import { createServer, type Server as HttpServer } from 'node:http';
import { METRICS_REFUSAL, mayReadMetrics } from './platform/metrics.js';
import { temporalSdkMetrics } from './temporal/worker.js';
import { wireRecordTrigger } from './workflow-definitions/record-trigger.js';

export interface StackOptions {
  /** Start embedded PostgreSQL / Temporal when DATABASE_URL / TEMPORAL_ADDRESS are unset. */
  embedded: boolean;
  roles: { api: boolean; worker: boolean };
  /** Prebuilt workflow bundle (tests and production images). */
  workflowBundle?: string;
  /** The clock sessions and nonces expire by (tests move it on instead of waiting); Date.now by default. */
  clock?: () => number;
}

export interface Stack {
  services: Services;
  server?: Server;
  worker?: RunningWorker;
  /** `codec`: the loopback codec listener the embedded Temporal Web UI decodes through. */
  urls: { api?: string; temporalUi?: string; codec?: string; metrics?: string; temporal: string; database: string };
  adminPassword?: string;
  /** Child processes started by the stack (embedded PostgreSQL, Temporal dev server). */
  childPids: number[];
  stop(): Promise<void>;
}

export const EMBEDDED_DATABASE = 'svc';

/** Creates database `name` on the server behind `serverUrl` when it does not exist yet. */
export async function ensureDatabase(serverUrl: string, name: string): Promise<string> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    const exists = await client.query('select 1 from pg_database where datname = $1', [name]);
    if (!exists.rowCount) await client.query(`create database ${client.escapeIdentifier(name)}`);
  } finally {
    await client.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** The master key: SVC_ENCRYPTION_KEY, or (embedded default only) one generated into the data dir. */
export async function loadKeyRing(config: Config, embeddedDatabase: boolean): Promise<KeyRing> {
  let previous: KeyRing[];
  try {
    previous = (config.SVC_PREVIOUS_ENCRYPTION_KEYS ?? '')
      .split(',')
      .filter((k) => k.trim())
      .map((k) => new KeyRing(parseMasterKey(k)));
  } catch (err) {
    throw new ConfigError('SVC_PREVIOUS_ENCRYPTION_KEYS', (err as Error).message);
  }
  if (config.SVC_ENCRYPTION_KEY) {
    try {
      return new KeyRing(parseMasterKey(config.SVC_ENCRYPTION_KEY), previous);
    } catch (err) {
      throw new ConfigError('SVC_ENCRYPTION_KEY', (err as Error).message);
    }
  }
  if (!embeddedDatabase) {
    throw new ConfigError('SVC_ENCRYPTION_KEY', 'required when DATABASE_URL is set (every process must share the key)');
  }
  const file = resolve(config.SVC_DATA_DIR, 'encryption.key');
  if (!existsSync(file)) {
    await mkdir(config.SVC_DATA_DIR, { recursive: true });
    await writeFile(file, generateMasterKey() + '\n', { mode: 0o600, flag: 'wx' }).catch((err) => {
      if (err.code !== 'EEXIST') throw err;
    });
  }
  return new KeyRing(parseMasterKey(await readFile(file, 'utf8')), previous);
}

/** Stops what a stack started, in reverse order; a step that fails is logged and the rest still run. */
class Cleanups {
  private readonly steps: (() => Promise<void>)[] = [];
  constructor(private readonly logger: Logger) {}

  push(step: () => Promise<void>): void {
    this.steps.push(step);
  }

  async run(): Promise<void> {
    for (const step of this.steps.reverse()) {
      await step().catch((err) => this.logger.error({ err }, 'error while stopping'));
    }
    this.steps.length = 0;
  }
}

/** DATABASE_URL, or embedded PostgreSQL in the data directory. */
async function startDatabase(config: Config, logger: Logger, options: StackOptions, cleanups: Cleanups, childPids: number[]): Promise<string> {
  if (config.DATABASE_URL) return config.DATABASE_URL;
  if (!options.embedded) throw new ConfigError('DATABASE_URL', 'required for this command');
  const pgServer = new EmbeddedPostgres({ dataDir: join(config.SVC_DATA_DIR, 'pg'), port: config.SVC_EMBEDDED_PG_PORT, logger });
  logger.info('starting embedded PostgreSQL');
  const serverUrl = await pgServer.start();
  cleanups.push(() => pgServer.stop());
  childPids.push(pgServer.pid!);
  return ensureDatabase(serverUrl, EMBEDDED_DATABASE);
}

/** TEMPORAL_ADDRESS, or the Temporal dev server with its Web UI (and the loopback codec listener it decodes through). */
async function startTemporal(
  config: Config,
  logger: Logger,
  keys: KeyRing,
  options: StackOptions,
  cleanups: Cleanups,
  childPids: number[],
): Promise<{ address: string; ui?: string; codec?: string }> {
  const ui = config.TEMPORAL_UI_URL;
  if (config.TEMPORAL_ADDRESS) return { address: config.TEMPORAL_ADDRESS, ...(ui ? { ui } : {}) };
  if (!options.embedded) throw new ConfigError('TEMPORAL_ADDRESS', 'required for this command');
  const cli = await provisionTemporalCli(logger, config.TEMPORAL_CLI);
  const temporalUi = ui ?? `http://localhost:${config.TEMPORAL_UI_PORT}`;
  let codec: string | undefined;
  // The UI calls its codec from the operator's browser without the API's credentials; on one
  // machine a loopback-only listener stands in for them (docs/operators.md, the trade-off).
  if (config.SVC_CODEC_PORT !== 'off') {
    const listener = await startLoopbackCodec({
      codec: new EncryptionCodec(keys),
      port: config.SVC_CODEC_PORT,
      uiOrigins: [temporalUi, `http://localhost:${config.TEMPORAL_UI_PORT}`, `http://127.0.0.1:${config.TEMPORAL_UI_PORT}`],
      bodyLimit: config.SVC_BODY_LIMIT,
      logger,
    });
    cleanups.push(() => listener.close());
    codec = listener.url;
  }
  const devServer = new TemporalDevServer({
    cli,
    port: config.TEMPORAL_PORT,
    uiPort: config.TEMPORAL_UI_PORT,
    dbFile: resolve(config.SVC_DATA_DIR, 'temporal.db'),
    codecEndpoint: codec ?? `http://localhost:${config.PORT}/api/temporal-codec`,
    logger,
  });
  logger.info('starting the Temporal dev server');
  const address = await devServer.start();
  cleanups.push(() => devServer.stop());
  childPids.push(devServer.pid!);
  return { address, ui: temporalUi, ...(codec ? { codec } : {}) };
}

/** The worker, its sweeps, and (on its own) its metrics listener. Answers the worker and its metrics URL. */
async function startWorkerRole(
  services: Services,
  temporalAddress: string,
  options: StackOptions,
  cleanups: Cleanups,
): Promise<{ worker: RunningWorker; metricsUrl?: string }> {
  const { config, logger } = services;
  const worker = await startWorker(services, temporalAddress, options.workflowBundle ? { bundlePath: options.workflowBundle } : {});
  cleanups.push(() => worker.shutdown());
  if (options.roles.api) {
    const stopEager = useEagerClient(services, worker.connection);
    cleanups.push(async () => stopEager());
  }
  // Runs ended from outside (terminated in the Web UI, timed out) never report back
  // themselves; the worker reconciles their mirror records with Temporal.
  const sweeper = setInterval(() => {
    services.executions.sweep(10_000).catch((err) => logger.warn({ err }, 'execution sweep failed'));
    // Licence webhook deliveries written where nothing started them (the CLI, an outage).
    services.licenseWebhooks.sweep().catch((err) => logger.warn({ err }, 'licence webhook sweep failed'));
    // Events are kept for the longest lookback a wait may have, no longer; waits and approvals
    // of runs that ended without them (terminated in the Web UI) are closed.
    services.events.sweep().catch((err) => logger.warn({ err }, 'event sweep failed'));
    services.approvals.sweep().catch((err) => logger.warn({ err }, 'approval sweep failed'));
  }, 15_000);
  sweeper.unref();
  cleanups.push(async () => clearInterval(sweeper));
  // A worker on its own serves its metrics on a port of its own (the API serves them at /metrics).
  if (options.roles.api || config.SVC_METRICS_PORT === 'off') return { worker };
  const listener = await serveMetrics(services, config.SVC_METRICS_HOST, config.SVC_METRICS_PORT);
  cleanups.push(() => new Promise<void>((ok) => listener.close(() => ok())));
  return { worker, metricsUrl: `http://${config.SVC_METRICS_HOST}:${(listener.address() as { port: number }).port}/metrics` };
}

/** The HTTP API and the record trigger. Answers the server and its URL. */
async function startApiRole(services: Services, cleanups: Cleanups): Promise<{ server: Server; apiUrl: string }> {
  const { config } = services;
  const unsubscribeRecordTrigger = wireRecordTrigger(services);
  cleanups.push(async () => unsubscribeRecordTrigger());
  const { app } = buildApp(services);
  const server = await new Promise<Server>((ok, fail) => {
    const s = app.listen(config.PORT, config.HOST, () => ok(s));
    s.once('error', fail);
  });
  server.keepAliveTimeout = 65_000;
  answerClientErrors(server);
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : config.PORT;
  cleanups.push(
    () =>
      new Promise<void>((ok) => {
        server.close(() => ok());
        server.closeIdleConnections();
        setTimeout(() => server.closeAllConnections(), 5000).unref();
      }),
  );
  const apiUrl = `http://${config.HOST === '0.0.0.0' ? 'localhost' : config.HOST}:${port}`;
  services.publicUrl.listeningAt(apiUrl);
  return { server, apiUrl };
}

/** How long a starting process waits for PostgreSQL to accept its start-up statements. */
const DATABASE_PATIENCE_MS = 120_000;

/**
 * Brings up everything the configuration asks for, in dependency order, and returns a handle
 * whose stop() takes it down in reverse order. A failure half-way stops what had started.
 */
export async function startStack(config: Config, logger: Logger, options: StackOptions): Promise<Stack> {
  const cleanups = new Cleanups(logger);
  const childPids: number[] = [];
  try {
    // What the embedded default keeps in SVC_DATA_DIR (the key, PostgreSQL, Temporal's database) is for this account only.
    if (!config.DATABASE_URL || (options.embedded && !config.TEMPORAL_ADDRESS)) {
      const postgres = !config.DATABASE_URL ? await ensureRunAsUser() : undefined;
      await makeDataDirPrivate(config.SVC_DATA_DIR, logger, postgres?.gid);
    }
    const keys = await loadKeyRing(config, !config.DATABASE_URL);
    const databaseUrl = await startDatabase(config, logger, options, cleanups, childPids);
    const temporal = await startTemporal(config, logger, keys, options, cleanups, childPids);
    const services = await createServices(config, logger, keys, { databaseUrl, temporalAddress: temporal.address }, { clock: options.clock });
    cleanups.push(() => closeServices(services));
    // A process started while PostgreSQL restarts (or before it is up) waits for it, as it waits
    // for Temporal, instead of exiting: both steps are safe to run again.
    const databaseDeadline = Date.now() + DATABASE_PATIENCE_MS;
    const waiting = () => logger.warn('PostgreSQL is unavailable; waiting for it to start');
    const applied = await waitOutDatabase(() => migrate(services.orm), databaseDeadline, waiting);
    if (applied.length) logger.info({ migrations: applied }, 'migrations applied');
    const admin = await waitOutDatabase(
      () => services.users.bootstrapAdmin(config.SVC_ADMIN_PASSWORD, config.SVC_ADMIN_APP_PASSWORD),
      databaseDeadline,
      waiting,
    );
    const worker = options.roles.worker ? await startWorkerRole(services, temporal.address, options, cleanups) : undefined;
    const api = options.roles.api ? await startApiRole(services, cleanups) : undefined;
    const metricsUrl = worker?.metricsUrl ?? (api ? `${api.apiUrl}/metrics` : undefined);
    return {
      services,
      ...(api ? { server: api.server } : {}),
      ...(worker ? { worker: worker.worker } : {}),
      urls: {
        ...(api ? { api: api.apiUrl } : {}),
        ...(temporal.ui ? { temporalUi: temporal.ui } : {}),
        ...(temporal.codec ? { codec: temporal.codec } : {}),
        ...(metricsUrl ? { metrics: metricsUrl } : {}),
        temporal: temporal.address,
        database: mask(databaseUrl),
      },
      ...(admin.password ? { adminPassword: admin.password } : {}),
      childPids,
      stop: () => cleanups.run(),
    };
  } catch (err) {
    await cleanups.run();
    throw err;
  }
}

/** The worker's metrics listener: GET /metrics, for the clients mayReadMetrics lets in. */
async function serveMetrics(services: Services, host: string, port: number): Promise<HttpServer> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') return void res.writeHead(404).end();
    if (!mayReadMetrics({ remoteAddress: req.socket.remoteAddress, authorization: req.headers.authorization }, services.config.SVC_METRICS_TOKEN)) {
      return void res.writeHead(403, { 'content-type': 'text/plain' }).end(`${METRICS_REFUSAL}\n`);
    }
    services.metrics.text(temporalSdkMetrics).then(
      (text) => res.writeHead(200, { 'content-type': services.metrics.contentType }).end(text),
      (err: unknown) => {
        services.logger.warn({ err }, 'metrics could not be collected');
        res.writeHead(500).end();
      },
    );
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      fail(err.code === 'EADDRINUSE' ? new ConfigError('SVC_METRICS_PORT', `port ${port} on ${host} is taken (give each worker process its own)`) : err),
    );
    server.listen(port, host, () => ok());
  });
  return server;
}
