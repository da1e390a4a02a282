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
import { ManagedProcess } from './process.js';

/** The repository: deploy/ holds the files docker-compose.yml mounts, src/main.ts the service. */
export const projectRoot = fileURLToPath(new URL('../..', import.meta.url));
export const deployDir = join(projectRoot, 'deploy');

/** Every port of the one-machine cluster. */
export interface ClusterPorts {
  /** One port per API process. */
  api: number[];
  /** The embedded PostgreSQL (unused with DATABASE_URL). */
  postgres: number;
  /** Temporal's frontend (gRPC): what TEMPORAL_ADDRESS names. */
  temporal: number;
  temporalHistory: number;
  temporalMatching: number;
  temporalWorker: number;
  /** Ringpop membership of each Temporal service: below 32768 (Temporal stores them as smallint). */
  membership: { frontend: number; history: number; matching: number; worker: number };
  /** Temporal's Prometheus metrics. */
  temporalMetrics: number;
  /** Each worker process's metrics port (SVC_METRICS_PORT): one per worker, `off` for none. */
  workerMetrics: (number | 'off')[];
  ui: number;
}

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

const mask = (url: string) => url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');

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

/**
 * Brings up the production topology on this machine: PostgreSQL (embedded, or the server of
 * DATABASE_URL) with the service's and Temporal's databases, Temporal's schema by its sql tool,
 * the Temporal server and Web UI built from their Go modules and configured from deploy/, the
 * service's migrations, then `options.workers` worker and `options.apis` API processes. A failure
 * half-way stops what had started.
 */
export async function startCluster(options: ClusterOptions): Promise<Cluster> {
  const { config, logger, ports } = options;
  const files = resolve(options.deployDir ?? deployDir);
  const dataDir = resolve(options.dataDir);
  const logDir = join(dataDir, 'logs');
  await mkdir(logDir, { recursive: true });
  const children: ManagedProcess[] = [];
  const cleanups: (() => Promise<void>)[] = [];
  let stopping = false;
  let createdAdmin: string | undefined;
  const stopAll = async () => {
    stopping = true;
    for (const cleanup of cleanups.reverse()) await cleanup().catch((err) => logger.error({ err }, 'error while stopping'));
    cleanups.length = 0;
  };

  try {
    const membership = Object.values(ports.membership);
    if (membership.some((p) => p < 1 || p > 32_767))
      throw new ConfigError(
        'TEMPORAL_PORT',
        `Temporal's membership ports (${membership.join(', ')}) must lie between 1 and 32767: Temporal stores them as smallint`,
      );
    // The key every process shares: SVC_ENCRYPTION_KEY, or one generated into the data dir.
    if (config.DATABASE_URL && !config.SVC_ENCRYPTION_KEY)
      throw new ConfigError('SVC_ENCRYPTION_KEY', 'required when DATABASE_URL is set (every process must share the key)');
    await loadKeyRing({ ...config, SVC_DATA_DIR: dataDir }, !config.DATABASE_URL);
    const encryptionKey = config.SVC_ENCRYPTION_KEY ?? (await readFile(join(dataDir, 'encryption.key'), 'utf8')).trim();

    // Binaries (built once per machine) while PostgreSQL starts.
    const binaries = Promise.all([
      provisionGoModule(TEMPORAL_SERVER, logger),
      provisionGoModule(TEMPORAL_UI, logger),
      provisionTemporalCli(logger, config.TEMPORAL_CLI),
    ]);
    binaries.catch(() => undefined);

    let serverUrl: string;
    let databaseUrl: string;
    let postgres: Cluster['postgres'];
    if (config.DATABASE_URL) {
      databaseUrl = config.DATABASE_URL;
      serverUrl = config.DATABASE_URL;
    } else {
      if (await isPortOpen(ports.postgres))
        throw new Error(`PostgreSQL (SVC_EMBEDDED_PG_PORT): port ${ports.postgres} is already in use (is \`npm start\` or another cluster running?)`);
      const pg = new EmbeddedPostgres({
        dataDir: join(dataDir, 'pg'),
        port: ports.postgres,
        logger,
        detached: true,
        settings: await postgresSettings(join(files, 'postgresql.conf')),
        ...(options.ephemeralPostgres ? { ephemeral: true } : {}),
      });
      logger.info('starting PostgreSQL');
      serverUrl = await pg.start();
      cleanups.push(() => pg.stop());
      postgres = { stop: () => pg.stop(), start: async () => void (await pg.start()), pid: () => pg.pid };
      databaseUrl = await ensureDatabase(serverUrl, EMBEDDED_DATABASE);
    }
    const pgUrl = new URL(serverUrl);
    const pgEnv = {
      POSTGRES_SEEDS: pgUrl.hostname,
      DB_PORT: pgUrl.port || '5432',
      POSTGRES_USER: decodeURIComponent(pgUrl.username),
      POSTGRES_PWD: decodeURIComponent(pgUrl.password),
    };

    // The service's migrations and first user, once, before any API or worker starts.
    const prepared = (async () => {
      const orm = await openOrm(databaseUrl, logger, 2);
      try {
        const applied = await migrate(orm);
        if (applied.length) logger.info({ migrations: applied }, 'migrations applied');
        const admin = await createCommandServices(orm, config).users.bootstrapAdmin(config.SVC_ADMIN_PASSWORD, config.SVC_ADMIN_APP_PASSWORD);
        createdAdmin = admin.password;
        return admin;
      } finally {
        await orm.close(true);
      }
    })();
    prepared.catch(() => undefined);
    const bundled = (async () => {
      if (config.SVC_WORKFLOW_BUNDLE) return config.SVC_WORKFLOW_BUNDLE;
      const file = join(dataDir, 'workflow-bundle.js');
      await writeFile(file, (await bundleWorkflows()).code);
      return file;
    })();
    bundled.catch(() => undefined);

    const [server, ui, cli] = await binaries;
    const toolPath = [dirname(server['temporal-server']!), dirname(cli), process.env.PATH ?? ''].join(':');
    const baseChildEnv = {
      PATH: toolPath,
      HOME: process.env.HOME ?? '',
      ...(process.env.XDG_CACHE_HOME ? { XDG_CACHE_HOME: process.env.XDG_CACHE_HOME } : {}),
    };
    const temporalAddress = `127.0.0.1:${ports.temporal}`;

    logger.info('creating or upgrading the Temporal schema (deploy/temporal-setup.sh schema)');
    await runSetupScript(files, 'schema', { ...baseChildEnv, ...pgEnv }, join(logDir, 'temporal-setup.log'));

    for (const [what, port] of [
      ['Temporal (TEMPORAL_PORT)', ports.temporal],
      ['Temporal Web UI (TEMPORAL_UI_PORT)', ports.ui],
      ...ports.api.map((port, i) => [`API ${i + 1} (PORT${i ? ` + ${i}` : ''})`, port] as const),
      ...ports.workerMetrics.flatMap((port, i) =>
        port === 'off' ? [] : [[`worker ${i + 1}'s metrics (SVC_METRICS_PORT${i ? ` + ${i}` : ''})`, port] as const],
      ),
    ] as const)
      if (await isPortOpen(port)) throw new Error(`${what}: port ${port} is already in use (is \`npm start\` or another cluster running?)`);

    const supervise = (p: ManagedProcess) => {
      p.onUnexpectedExit = (why) => {
        if (stopping || !options.supervise) return;
        logger.error({ process: p.name, output: why.slice(-800) }, `${p.name} stopped unexpectedly; starting it again`);
        const again = (delay: number) =>
          setTimeout(() => {
            if (stopping || p.running) return;
            p.start(logger).catch((err) => {
              logger.error({ process: p.name, err: (err as Error).message }, `${p.name} did not start again; retrying`);
              again(Math.min(delay * 2, 30_000));
            });
          }, delay).unref();
        again(1000);
      };
      children.push(p);
      return p;
    };

    const temporal = supervise(
      new ManagedProcess({
        name: 'temporal-server',
        command: server['temporal-server']!,
        args: ['--root', '/', '--config', files, '--env', 'temporal-server', '--allow-no-auth', 'start'],
        cwd: projectRoot,
        env: {
          ...baseChildEnv,
          ...pgEnv,
          BIND_ON_IP: '127.0.0.1',
          FRONTEND_GRPC_PORT: String(ports.temporal),
          HISTORY_GRPC_PORT: String(ports.temporalHistory),
          MATCHING_GRPC_PORT: String(ports.temporalMatching),
          WORKER_GRPC_PORT: String(ports.temporalWorker),
          FRONTEND_MEMBERSHIP_PORT: String(ports.membership.frontend),
          HISTORY_MEMBERSHIP_PORT: String(ports.membership.history),
          MATCHING_MEMBERSHIP_PORT: String(ports.membership.matching),
          WORKER_MEMBERSHIP_PORT: String(ports.membership.worker),
          PROMETHEUS_ENDPOINT: `127.0.0.1:${ports.temporalMetrics}`,
          DYNAMIC_CONFIG_FILE_PATH: join(files, 'temporal-dynamicconfig.yaml'),
          LOG_LEVEL: 'info',
        },
        ready: () => isPortOpen(ports.temporal),
        readyTimeoutMs: 120_000,
        logFile: join(logDir, 'temporal-server.log'),
        stopGraceMs: 20_000,
      }),
    );
    logger.info('starting the Temporal server');
    await temporal.start(logger);
    cleanups.push(() => temporal.stop().then(() => temporal.close()));
    logger.info('registering the namespace (deploy/temporal-setup.sh namespace)');
    await runSetupScript(
      files,
      'namespace',
      { ...baseChildEnv, TEMPORAL_ADDRESS: temporalAddress, TEMPORAL_NAMESPACE: config.TEMPORAL_NAMESPACE },
      join(logDir, 'temporal-setup.log'),
      () => (temporal.running ? undefined : `the Temporal server exited: ${temporal.recentOutput.slice(-1500)}`),
    );

    const admin = await prepared;
    const workflowBundle = await bundled;
    const uiUrl = config.TEMPORAL_UI_URL ?? `http://localhost:${ports.ui}`;
    const host = config.HOST === '0.0.0.0' ? 'localhost' : config.HOST;
    const apiUrls = ports.api.map((port) => `http://${host}:${port}`);

    // API and worker processes: the user's environment, the cluster's endpoints and key.
    const serviceEnv = (extra: Record<string, string>) => {
      const env: NodeJS.ProcessEnv = { ...(options.baseEnv ?? process.env) };
      for (const key of ['SVC_ROLE', 'SVC_DATA_DIR', 'TEMPORAL_CLI']) delete env[key];
      return {
        ...env,
        DATABASE_URL: databaseUrl,
        TEMPORAL_ADDRESS: temporalAddress,
        TEMPORAL_UI_URL: uiUrl,
        HOST: config.HOST,
        SVC_ENCRYPTION_KEY: encryptionKey,
        SVC_WORKFLOW_BUNDLE: workflowBundle,
        ...extra,
      };
    };
    const stdoutLines = (name: string) =>
      options.serviceLogs === 'stdout'
        ? (line: string) => {
            let out = line;
            try {
              out = JSON.stringify({ process: name, ...JSON.parse(line) });
            } catch {
              // not a JSON line: as it is
            }
            process.stdout.write(out + '\n');
          }
        : undefined;
    const service = (role: 'api' | 'worker', index: number) => {
      const name = `${role}-${index}`;
      const onStdoutLine = stdoutLines(name);
      return supervise(
        new ManagedProcess({
          name,
          command: process.execPath,
          args: ['--import', 'tsx', 'src/main.ts', role],
          cwd: projectRoot,
          env: serviceEnv(role === 'api' ? { PORT: String(ports.api[index - 1]) } : { SVC_METRICS_PORT: String(ports.workerMetrics[index - 1]) }),
          ready:
            role === 'api'
              ? httpReady(`http://127.0.0.1:${ports.api[index - 1]}/readyz`)
              : async (p) => p.stderrSeen.includes('Workflow automation service is up.'),
          readyTimeoutMs: 180_000,
          ...(onStdoutLine ? { onStdoutLine } : {}),
          logFile: join(logDir, `${name}.log`),
          stopGraceMs: 30_000,
        }),
      );
    };
    const workers = ports.workerMetrics.map((_, i) => service('worker', i + 1));
    const apis = ports.api.map((_, i) => service('api', i + 1));
    logger.info(`starting ${workers.length} workers and ${apis.length} APIs`);
    const started = await Promise.allSettled([...workers, ...apis].map((p) => p.start(logger)));
    cleanups.push(() => Promise.all(workers.map((w) => w.stop().then(() => w.close()))).then(() => undefined));
    cleanups.push(() => Promise.all(apis.map((a) => a.stop().then(() => a.close()))).then(() => undefined));
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;

    const webUi = supervise(
      new ManagedProcess({
        name: 'temporal-ui',
        command: ui['ui-server']!,
        args: ['--root', '/', '--config', files, '--env', 'temporal-ui', 'start'],
        cwd: projectRoot,
        env: {
          ...baseChildEnv,
          TEMPORAL_ADDRESS: temporalAddress,
          TEMPORAL_UI_HOST: '127.0.0.1',
          TEMPORAL_UI_PORT: String(ports.ui),
          TEMPORAL_UI_URL: uiUrl,
          TEMPORAL_DEFAULT_NAMESPACE: config.TEMPORAL_NAMESPACE,
          // The operator's browser calls API 1 (there is no load balancer on one machine).
          TEMPORAL_CODEC_ENDPOINT: `http://localhost:${ports.api[0]}/api/temporal-codec`,
        },
        ready: () => isPortOpen(ports.ui),
        readyTimeoutMs: 60_000,
        logFile: join(logDir, 'temporal-ui.log'),
      }),
    );
    await webUi.start(logger);
    cleanups.push(() => webUi.stop().then(() => webUi.close()));

    return {
      urls: {
        apis: apiUrls,
        ui: uiUrl,
        temporal: temporalAddress,
        temporalMetrics: `http://127.0.0.1:${ports.temporalMetrics}/metrics`,
        workerMetrics: ports.workerMetrics.filter((p) => p !== 'off').map((p) => `http://${config.SVC_METRICS_HOST}:${p}/metrics`),
        database: mask(databaseUrl),
        logs: logDir,
      },
      databaseUrl,
      postgresServerUrl: serverUrl,
      temporalAddress,
      encryptionKey,
      workflowBundle,
      ...(admin.password ? { adminPassword: admin.password } : {}),
      ...(postgres ? { postgres } : {}),
      temporal,
      ui: webUi,
      apis,
      workers,
      async restart(p, env = {}) {
        await p.stop();
        p.spec = { ...p.spec, env: { ...p.spec.env, ...env } };
        await p.start(logger);
      },
      stop: stopAll,
      async killAll() {
        stopping = true;
        await Promise.all(children.map((c) => c.kill()));
        await postgres?.stop();
      },
    };
  } catch (err) {
    await stopAll();
    // The generated password is shown once: a start that fails after creating the user says it.
    if (createdAdmin && err instanceof Error) err.message += `\n(user "admin" was created with password ${createdAdmin}; it is shown once)`;
    throw err;
  }
}
