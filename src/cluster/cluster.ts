import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config.js';
import { ConfigError } from '../config.js';
import { createCommandServices } from '../services.js';
import { migrate, openOrm } from '../db/orm.js';
import { isPortOpen, tail } from '../platform/child-process.js';
import { EmbeddedPostgres } from '../platform/embedded-postgres.js';
import type { Logger } from '../platform/logger.js';
import { provisionTemporalCli } from '../platform/temporal-server.js';
import { EMBEDDED_DATABASE, ensureDatabase, loadKeyRing } from '../stack.js';
import { bundleWorkflows } from '../temporal/worker.js';
import { TEMPORAL_SERVER, TEMPORAL_UI, provisionGoModule } from './binaries.js';
import { ManagedProcess, type ProcessSpec } from './process.js';
import type { ClusterPorts } from './cluster-specs.js';

export type { ClusterPorts } from './cluster-specs.js';
import {
  checkMembershipPorts,
  mask,
  portsToCheck,
  postgresEnv,
  serviceEnv,
  tagLine,
  temporalServerSpec,
  temporalUiSpec,
  type ClusterLayout,
  type ServiceEndpoints,
} from './cluster-specs.js';

/** The repository: deploy/ holds the files docker-compose.yml mounts, src/main.ts the service. */
export const projectRoot = fileURLToPath(new URL('../..', import.meta.url));
export const deployDir = join(projectRoot, 'deploy');

/**
 * The ports `npm run cluster` uses: the API on PORT and PORT+1 (8080, 8081), Temporal's frontend
 * on TEMPORAL_PORT (7233) with its other services beside it as in Temporal's own defaults
 * (history +1, matching +2, worker +6, metrics +7, membership 300 below each), the Web UI on
 * TEMPORAL_UI_PORT (8233), PostgreSQL on SVC_EMBEDDED_PG_PORT (5488): those of `npm start`, so one
 * of the two runs at a time unless the ports are set. Worker i serves its metrics on
 * SVC_METRICS_PORT + i - 1 (9464, 9465).
 */
export function clusterPorts(config: Config, apis = 2, workers = 2): ClusterPorts {
  const t = config.TEMPORAL_PORT;
  const metrics = config.SVC_METRICS_PORT;
  return {
    api: Array.from({ length: apis }, (_, i) => config.PORT + i),
    postgres: config.SVC_EMBEDDED_PG_PORT,
    temporal: t,
    temporalHistory: t + 1,
    temporalMatching: t + 2,
    temporalWorker: t + 6,
    membership: { frontend: t - 300, history: t - 299, matching: t - 298, worker: t - 294 },
    temporalMetrics: t + 7,
    workerMetrics: Array.from({ length: workers }, (_, i) => (metrics === 'off' ? 'off' : metrics + i)),
    ui: config.TEMPORAL_UI_PORT,
  };
}

export interface ClusterOptions {
  config: Config;
  logger: Logger;
  /** State: the embedded PostgreSQL, the generated key, logs, the workflow bundle. */
  dataDir: string;
  /** One API process per port of `ports.api`, one worker per port of `ports.workerMetrics`. */
  ports: ClusterPorts;
  /**
   * Where the API and worker processes' JSON log lines go: this command's stdout (each line
   * tagged with its process), or `<dataDir>/logs/<process>.log`. Temporal's, the UI's and the
   * schema job's logs always go to files there.
   */
  serviceLogs: 'stdout' | 'files';
  /** Restart a process that exits on its own, as docker-compose.yml's restart policy does. */
  supervise: boolean;
  /** Environment every API and worker process starts from (default: this process's). */
  baseEnv?: NodeJS.ProcessEnv;
  /** PostgreSQL without fsync: tests and benchmarks of the code only, never for data you keep. */
  ephemeralPostgres?: boolean;
  /**
   * The directory of the cluster's files (postgresql.conf, temporal-setup.sh, temporal-server.yaml,
   * temporal-dynamicconfig.yaml, temporal-ui.yaml): the repository's deploy/, or a variant of it
   * (benchmarks compare settings side by side).
   */
  deployDir?: string;
}

export interface Cluster {
  urls: { apis: string[]; ui: string; temporal: string; temporalMetrics: string; workerMetrics: string[]; database: string; logs: string };
  /** The service's database, unmasked (tests). */
  databaseUrl: string;
  /** The PostgreSQL server holding it and Temporal's two databases. */
  postgresServerUrl: string;
  temporalAddress: string;
  encryptionKey: string;
  workflowBundle: string;
  /** Set when this command created the `admin` user and generated its password (shown once). */
  adminPassword?: string;
  /** The embedded PostgreSQL (undefined with DATABASE_URL): stop and start it again. */
  postgres?: { stop(): Promise<void>; start(): Promise<void>; pid(): number | undefined };
  temporal: ManagedProcess;
  ui: ManagedProcess;
  apis: ManagedProcess[];
  workers: ManagedProcess[];
  /** Stops `process` and starts it again, with `env` added to its environment from then on. */
  restart(process: ManagedProcess, env?: Record<string, string>): Promise<void>;
  /** Everything, in reverse order of start. */
  stop(): Promise<void>;
  /** SIGKILLs every child at once (a second Ctrl-C). */
  killAll(): Promise<void>;
}

/**
 * The settings of deploy/postgresql.conf (`name = value` lines), for the embedded PostgreSQL:
 * the same file docker-compose.yml mounts as the server's config_file. listen_addresses is left
 * out: the embedded server listens on 127.0.0.1 only.
 */
export async function postgresSettings(file = join(deployDir, 'postgresql.conf')): Promise<Record<string, string>> {
  const settings: Record<string, string> = {};
  for (const raw of (await readFile(file, 'utf8')).split('\n')) {
    const line = raw.replace(/#.*$/, '').trim();
    const match = /^([a-z_.]+)\s*=?\s*(.+)$/i.exec(line);
    if (!match) continue;
    const [, name, value] = match;
    if (name !== 'listen_addresses') settings[name!] = value!.replace(/^'(.*)'$/, '$1');
  }
  return settings;
}

/**
 * Runs deploy/temporal-setup.sh (the same script as docker-compose.yml's temporal-setup job).
 * `abort` is polled while it runs: a reason stops it (the server it waits for has exited).
 */
async function runSetupScript(
  dir: string,
  step: 'schema' | 'namespace',
  env: NodeJS.ProcessEnv,
  logFile: string,
  abort?: () => string | undefined,
): Promise<void> {
  const log = createWriteStream(logFile, { flags: 'a' });
  const output = tail(4000);
  try {
    await new Promise<void>((ok, fail) => {
      const child = spawn('sh', [join(dir, 'temporal-setup.sh'), step], { cwd: projectRoot, env, stdio: ['ignore', 'pipe', 'pipe'] });
      for (const stream of [child.stdout!, child.stderr!])
        stream.on('data', (c: Buffer) => {
          output.push(c);
          log.write(c);
        });
      const watch = setInterval(() => {
        const reason = abort?.();
        if (!reason) return;
        clearInterval(watch);
        child.kill('SIGKILL');
        fail(new Error(`deploy/temporal-setup.sh ${step} stopped: ${reason}`));
      }, 500);
      child.once('error', fail);
      child.once('exit', (code) => {
        clearInterval(watch);
        if (code === 0) ok();
        else fail(new Error(`deploy/temporal-setup.sh ${step} failed (${code}): ${output.text}`));
      });
    });
  } finally {
    await new Promise<void>((ok) => log.end(ok));
  }
}

const httpReady = (url: string) => async () => (await fetch(url, { signal: AbortSignal.timeout(2000) }).catch(() => undefined))?.status === 200;

/** A cluster being started: where it lives, what it started so far, and how to stop that again. */
interface Startup {
  options: ClusterOptions;
  logger: Logger;
  /** The cluster's files: deploy/ or the variant of `options.deployDir`. */
  files: string;
  dataDir: string;
  logDir: string;
  children: ManagedProcess[];
  /** What stops each part started so far, in order of start. */
  cleanups: (() => Promise<void>)[];
  stopping: boolean;
  /** The password of the `admin` user this start created (shown once). */
  createdAdmin?: string;
}

/** Where the service's data lives: its database, and the PostgreSQL server that holds it and Temporal's. */
interface Databases {
  serverUrl: string;
  databaseUrl: string;
  postgres?: Cluster['postgres'];
}

/**
 * Brings up the production topology on this machine: PostgreSQL (embedded, or the server of
 * DATABASE_URL) with the service's and Temporal's databases, Temporal's schema by its sql tool,
 * the Temporal server and Web UI built from their Go modules and configured from deploy/, the
 * service's migrations, then `options.workers` worker and `options.apis` API processes. A failure
 * half-way stops what had started.
 */
export async function startCluster(options: ClusterOptions): Promise<Cluster> {
  const dataDir = resolve(options.dataDir);
  const run: Startup = {
    options,
    logger: options.logger,
    files: resolve(options.deployDir ?? deployDir),
    dataDir,
    logDir: join(dataDir, 'logs'),
    children: [],
    cleanups: [],
    stopping: false,
  };
  await mkdir(run.logDir, { recursive: true });
  try {
    return await bringUp(run);
  } catch (err) {
    await stopAll(run);
    // The generated password is shown once: a start that fails after creating the user says it.
    if (run.createdAdmin && err instanceof Error) err.message += `\n(user "admin" was created with password ${run.createdAdmin}; it is shown once)`;
    throw err;
  }
}

/** Everything started so far, in reverse order of start. */
async function stopAll(run: Startup): Promise<void> {
  run.stopping = true;
  for (const cleanup of run.cleanups.reverse()) await cleanup().catch((err) => run.logger.error({ err }, 'error while stopping'));
  run.cleanups.length = 0;
}

/** The steps of startCluster, in order; the slow independent ones (binaries, migrations, bundle) run meanwhile. */
async function bringUp(run: Startup): Promise<Cluster> {
  const { config, ports } = run.options;
  checkMembershipPorts(ports);
  const encryptionKey = await clusterKey(config, run.dataDir);
  // Binaries (built once per machine) while PostgreSQL starts.
  const binaries = Promise.all([
    provisionGoModule(TEMPORAL_SERVER, run.logger),
    provisionGoModule(TEMPORAL_UI, run.logger),
    provisionTemporalCli(run.logger, config.TEMPORAL_CLI),
  ]);
  binaries.catch(() => undefined);
  const db = await startDatabase(run);
  const pgEnv = postgresEnv(db.serverUrl);
  const prepared = background(prepareDatabase(run, db.databaseUrl));
  const bundled = background(workflowBundleFile(config, run.dataDir));

  const [server, ui, cli] = await binaries;
  const layout: ClusterLayout = {
    files: run.files,
    logDir: run.logDir,
    projectRoot,
    baseChildEnv: {
      // Each tool may have been found in a different place (PATH, the project's or the user's cache).
      PATH: [...new Set([...Object.values(server), cli].map((path) => dirname(path))), process.env.PATH ?? ''].join(':'),
      HOME: process.env.HOME ?? '',
      ...(process.env.XDG_CACHE_HOME ? { XDG_CACHE_HOME: process.env.XDG_CACHE_HOME } : {}),
    },
    temporalAddress: `127.0.0.1:${ports.temporal}`,
  };
  run.logger.info('creating or upgrading the Temporal schema (deploy/temporal-setup.sh schema)');
  await runSetupScript(run.files, 'schema', { ...layout.baseChildEnv, ...pgEnv }, join(run.logDir, 'temporal-setup.log'));
  for (const [what, port] of portsToCheck(ports))
    if (await isPortOpen(port)) throw new Error(`${what}: port ${port} is already in use (is \`npm start\` or another cluster running?)`);
  const temporal = await startTemporal(run, layout, server['temporal-server']!, pgEnv);

  const admin = await prepared;
  const endpoints: ServiceEndpoints = {
    databaseUrl: db.databaseUrl,
    temporalAddress: layout.temporalAddress,
    uiUrl: config.TEMPORAL_UI_URL ?? `http://localhost:${ports.ui}`,
    host: config.HOST,
    encryptionKey,
    workflowBundle: await bundled,
  };
  const { workers, apis } = await startServices(run, endpoints);
  const webUi = supervise(
    run,
    new ManagedProcess({
      ...temporalUiSpec(layout, ui['ui-server']!, ports, { url: endpoints.uiUrl, namespace: config.TEMPORAL_NAMESPACE }),
      ready: () => isPortOpen(ports.ui),
    }),
  );
  await webUi.start(run.logger);
  run.cleanups.push(() => webUi.stop().then(() => webUi.close()));
  return clusterHandle(run, { db, endpoints, admin, temporal, ui: webUi, apis, workers });
}

/** A promise awaited later: its rejection is handled where it is awaited, not reported as unhandled meanwhile. */
function background<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

/** The key every process shares: SVC_ENCRYPTION_KEY, or one generated into the data dir. */
async function clusterKey(config: Config, dataDir: string): Promise<string> {
  if (config.DATABASE_URL && !config.SVC_ENCRYPTION_KEY)
    throw new ConfigError('SVC_ENCRYPTION_KEY', 'required when DATABASE_URL is set (every process must share the key)');
  await loadKeyRing({ ...config, SVC_DATA_DIR: dataDir }, !config.DATABASE_URL);
  return config.SVC_ENCRYPTION_KEY ?? (await readFile(join(dataDir, 'encryption.key'), 'utf8')).trim();
}

/** The server of DATABASE_URL, or the embedded PostgreSQL (configured from postgresql.conf) with the service's database. */
async function startDatabase(run: Startup): Promise<Databases> {
  const { config, ports } = run.options;
  if (config.DATABASE_URL) return { databaseUrl: config.DATABASE_URL, serverUrl: config.DATABASE_URL };
  if (await isPortOpen(ports.postgres))
    throw new Error(`PostgreSQL (SVC_EMBEDDED_PG_PORT): port ${ports.postgres} is already in use (is \`npm start\` or another cluster running?)`);
  const pg = new EmbeddedPostgres({
    dataDir: join(run.dataDir, 'pg'),
    port: ports.postgres,
    logger: run.logger,
    detached: true,
    settings: await postgresSettings(join(run.files, 'postgresql.conf')),
    ...(run.options.ephemeralPostgres ? { ephemeral: true } : {}),
  });
  run.logger.info('starting PostgreSQL');
  const serverUrl = await pg.start();
  run.cleanups.push(() => pg.stop());
  const postgres = { stop: () => pg.stop(), start: async () => void (await pg.start()), pid: () => pg.pid };
  return { serverUrl, postgres, databaseUrl: await ensureDatabase(serverUrl, EMBEDDED_DATABASE) };
}

/** The service's migrations and first user, once, before any API or worker starts. */
async function prepareDatabase(run: Startup, databaseUrl: string): Promise<{ password?: string }> {
  const { config } = run.options;
  const orm = await openOrm(databaseUrl, run.logger, 2);
  try {
    const applied = await migrate(orm);
    if (applied.length) run.logger.info({ migrations: applied }, 'migrations applied');
    const admin = await createCommandServices(orm, config).users.bootstrapAdmin(config.SVC_ADMIN_PASSWORD, config.SVC_ADMIN_APP_PASSWORD);
    run.createdAdmin = admin.password;
    return admin;
  } finally {
    await orm.close(true);
  }
}

/** SVC_WORKFLOW_BUNDLE, or the workflow code bundled once into the data dir for every worker. */
async function workflowBundleFile(config: Config, dataDir: string): Promise<string> {
  if (config.SVC_WORKFLOW_BUNDLE) return config.SVC_WORKFLOW_BUNDLE;
  const file = join(dataDir, 'workflow-bundle.js');
  await writeFile(file, (await bundleWorkflows()).code);
  return file;
}

/** A child the cluster watches: one that exits on its own is started again (with `supervise`), backing off up to 30 s. */
function supervise(run: Startup, p: ManagedProcess): ManagedProcess {
  const { logger } = run;
  p.onUnexpectedExit = (why) => {
    if (run.stopping || !run.options.supervise) return;
    logger.error({ process: p.name, output: why.slice(-800) }, `${p.name} stopped unexpectedly; starting it again`);
    const again = (delay: number) =>
      setTimeout(() => {
        if (run.stopping || p.running) return;
        p.start(logger).catch((err) => {
          logger.error({ process: p.name, err: (err as Error).message }, `${p.name} did not start again; retrying`);
          again(Math.min(delay * 2, 30_000));
        });
      }, delay).unref();
    again(1000);
  };
  run.children.push(p);
  return p;
}

/** Temporal's server, then its namespace (deploy/temporal-setup.sh namespace) once it serves. */
async function startTemporal(run: Startup, layout: ClusterLayout, command: string, pgEnv: Record<string, string>): Promise<ManagedProcess> {
  const { config, ports } = run.options;
  const temporal = supervise(run, new ManagedProcess({ ...temporalServerSpec(layout, command, ports, pgEnv), ready: () => isPortOpen(ports.temporal) }));
  run.logger.info('starting the Temporal server');
  await temporal.start(run.logger);
  run.cleanups.push(() => temporal.stop().then(() => temporal.close()));
  run.logger.info('registering the namespace (deploy/temporal-setup.sh namespace)');
  await runSetupScript(
    run.files,
    'namespace',
    { ...layout.baseChildEnv, TEMPORAL_ADDRESS: layout.temporalAddress, TEMPORAL_NAMESPACE: config.TEMPORAL_NAMESPACE },
    join(run.logDir, 'temporal-setup.log'),
    () => (temporal.running ? undefined : `the Temporal server exited: ${temporal.recentOutput.slice(-1500)}`),
  );
  return temporal;
}

/** The worker and API processes, started together; the first that fails to start fails the cluster. */
async function startServices(run: Startup, endpoints: ServiceEndpoints): Promise<{ workers: ManagedProcess[]; apis: ManagedProcess[] }> {
  const { ports } = run.options;
  const workers = ports.workerMetrics.map((_, i) => supervise(run, new ManagedProcess(serviceSpec(run, endpoints, 'worker', i + 1))));
  const apis = ports.api.map((_, i) => supervise(run, new ManagedProcess(serviceSpec(run, endpoints, 'api', i + 1))));
  run.logger.info(`starting ${workers.length} workers and ${apis.length} APIs`);
  const started = await Promise.allSettled([...workers, ...apis].map((p) => p.start(run.logger)));
  run.cleanups.push(() => Promise.all(workers.map((w) => w.stop().then(() => w.close()))).then(() => undefined));
  run.cleanups.push(() => Promise.all(apis.map((a) => a.stop().then(() => a.close()))).then(() => undefined));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) throw failed.reason;
  return { workers, apis };
}

/** API or worker process `index` (from 1): the user's environment, the cluster's endpoints and key, its own port. */
function serviceSpec(run: Startup, endpoints: ServiceEndpoints, role: 'api' | 'worker', index: number): ProcessSpec {
  const { options } = run;
  const { ports } = options;
  const name = `${role}-${index}`;
  const extra: Record<string, string> = role === 'api' ? { PORT: String(ports.api[index - 1]) } : { SVC_METRICS_PORT: String(ports.workerMetrics[index - 1]) };
  return {
    name,
    command: process.execPath,
    args: ['--import', 'tsx', 'src/main.ts', role],
    cwd: projectRoot,
    env: serviceEnv(options.baseEnv ?? process.env, endpoints, extra),
    ready:
      role === 'api' ? httpReady(`http://127.0.0.1:${ports.api[index - 1]}/readyz`) : async (p) => p.stderrSeen.includes('Workflow automation service is up.'),
    readyTimeoutMs: 180_000,
    ...(options.serviceLogs === 'stdout' ? { onStdoutLine: (line: string) => void process.stdout.write(tagLine(name, line) + '\n') } : {}),
    logFile: join(run.logDir, `${name}.log`),
    stopGraceMs: 30_000,
  };
}

/** The started cluster: its URLs, its processes, and how to restart, stop or kill them. */
function clusterHandle(
  run: Startup,
  parts: {
    db: Databases;
    endpoints: ServiceEndpoints;
    admin: { password?: string };
    temporal: ManagedProcess;
    ui: ManagedProcess;
    apis: ManagedProcess[];
    workers: ManagedProcess[];
  },
): Cluster {
  const { config, ports } = run.options;
  const { db, endpoints, admin } = parts;
  const host = config.HOST === '0.0.0.0' ? 'localhost' : config.HOST;
  return {
    urls: {
      apis: ports.api.map((port) => `http://${host}:${port}`),
      ui: endpoints.uiUrl,
      temporal: endpoints.temporalAddress,
      temporalMetrics: `http://127.0.0.1:${ports.temporalMetrics}/metrics`,
      workerMetrics: ports.workerMetrics.filter((p) => p !== 'off').map((p) => `http://${config.SVC_METRICS_HOST}:${p}/metrics`),
      database: mask(db.databaseUrl),
      logs: run.logDir,
    },
    databaseUrl: db.databaseUrl,
    postgresServerUrl: db.serverUrl,
    temporalAddress: endpoints.temporalAddress,
    encryptionKey: endpoints.encryptionKey,
    workflowBundle: endpoints.workflowBundle,
    ...(admin.password ? { adminPassword: admin.password } : {}),
    ...(db.postgres ? { postgres: db.postgres } : {}),
    temporal: parts.temporal,
    ui: parts.ui,
    apis: parts.apis,
    workers: parts.workers,
    async restart(p, env = {}) {
      await p.stop();
      p.spec = { ...p.spec, env: { ...p.spec.env, ...env } };
      await p.start(run.logger);
    },
    stop: () => stopAll(run),
    async killAll() {
      run.stopping = true;
      await Promise.all(run.children.map((c) => c.kill()));
      await db.postgres?.stop();
    },
  };
}
