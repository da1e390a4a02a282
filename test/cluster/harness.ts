import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode } from '@temporalio/worker';
import pg from 'pg';
import { startCluster, type Cluster, type ClusterPorts } from '../../src/cluster/cluster.js';
import type { ManagedProcess } from '../../src/cluster/process.js';
import { loadConfig } from '../../src/config.js';
import { KeyRing, parseMasterKey } from '../../src/platform/crypto.js';
import { createLogger, type Logger } from '../../src/platform/logger.js';
import { EncryptionCodec } from '../../src/temporal/codec.js';
import { clientDataConverter } from '../../src/temporal/data-converter.js';
import { bundleOptions } from '../../src/temporal/worker.js';
import { cleanEnv } from '../helpers/cli.js';
import { eventually } from '../helpers/http-target.js';
import { HttpClient, type HttpResponse, type RequestOptions } from '../helpers/http.js';
import { OpenApiChecker } from '../helpers/openapi-check.js';
import { freeLowPorts, freePorts } from '../helpers/ports.js';
import { startTargets, type Targets } from './targets.js';

export const ADMIN_PASSWORD = 'cluster-admin-password';
export const ADMIN_APP_PASSWORD = 'cluster-suite-app-password-0123';

/** One HTTP exchange of the suite, for the verdict: which API, what it answered, in which window. */
export interface LedgerEntry {
  api: number;
  /** When it was sent (ms since the epoch). */
  at: number;
  method: string;
  path: string;
  /** 0 when no answer came (connection refused or reset). */
  status: number;
  error?: string;
  /** The fault window open when the request started or ended (503 and lost connections are allowed in one). */
  window?: string;
}

/** Everything the suite asked of the cluster that the verdict checks afterwards. */
export class Ledger {
  readonly entries: LedgerEntry[] = [];
  /** Execution ids the API accepted (run, webhook, replay), each with the workflow it belongs to. */
  readonly executions = new Map<number, { via: string }>();
  /** Gate decisions the API confirmed: action id -> the verdict. */
  readonly decisions = new Map<string, 'approved' | 'rejected'>();
  /** Open fault window: a restart or an API that is down. */
  get window(): string | undefined {
    return this.open;
  }
  set window(name: string | undefined) {
    this.open = name;
    this.windows.push({ name: name ?? '(closed)', at: Date.now() });
  }
  private open?: string;
  /** When each window opened and closed, for messages. */
  readonly windows: { name: string; at: number }[] = [];

  record(entry: LedgerEntry): void {
    this.entries.push(entry);
  }

  accept(executionId: number, via: string): void {
    this.executions.set(executionId, { via });
  }

  /** Answers other than a 2xx-4xx that a client of a healthy cluster could get, outside any window. */
  violations(): LedgerEntry[] {
    return this.entries.filter((e) => e.error === 'hang' || ((e.status >= 500 || e.status === 0) && !(e.window && (e.status === 503 || e.status === 0))));
  }
}

/** The service's HTTP client (every answer checked against the OpenAPI document), writing the ledger. */
class LedgerClient extends HttpClient {
  constructor(
    readonly index: number,
    baseUrl: string,
    checker: OpenApiChecker,
    private readonly ledger: Ledger,
  ) {
    super(baseUrl, checker, { login: 'admin', password: ADMIN_APP_PASSWORD });
  }

  override async request<T = any>(method: string, path: string, options: RequestOptions = {}): Promise<HttpResponse<T>> {
    const before = this.ledger.window;
    const entry: LedgerEntry = { api: this.index, at: Date.now(), method, path, status: 0 };
    this.ledger.record(entry);
    try {
      const res = await super.request<T>(method, path, options);
      entry.status = res.status;
      if (res.status >= 500) entry.error = `${(res.body as { error?: string })?.error} ${JSON.stringify((res.body as { data?: unknown })?.data ?? {})}`;
      const id = (res.body as { data?: { execution_id?: unknown } } | undefined)?.data?.execution_id;
      if (res.status < 300 && typeof id === 'number' && /\/(run|replay)(\?|$)|\/hooks\//.test(path)) this.ledger.accept(id, `${method} ${path}`);
      const action = /\/actions\/([^/]+)\/(approve|reject)$/.exec(path);
      if (res.status === 200 && action) this.ledger.decisions.set(action[1]!, action[2] === 'approve' ? 'approved' : 'rejected');
      return res;
    } catch (err) {
      entry.error = (err as Error).message;
      throw err;
    } finally {
      entry.window = before ?? this.ledger.window;
    }
  }
}

export interface Suite {
  cluster: Cluster;
  logger: Logger;
  targets: Targets;
  ledger: Ledger;
  /** The administrator's client of API 1 or 2. */
  api(index: 1 | 2): HttpClient;
  /** Base URL of API 1 or 2. */
  url(index: 1 | 2): string;
  checker: OpenApiChecker;
  /** A Temporal client with the service's payload codec (histories, replays). */
  temporal: Client;
  codec: EncryptionCodec;
  /** The workflow bundle of the next deployment (test/cluster/fixtures/workflows-next). */
  nextBundle: string;
  sql<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  /** The identity a worker process gives Temporal (the SDK's default: pid@host). */
  identity(worker: ManagedProcess): string;
  /**
   * Opens a fault window, runs `fn`, and closes the window once both APIs are ready again and
   * `probe` (a run request, say) has succeeded eight times in a row on each: until then a 503 is
   * part of the fault.
   */
  during<T>(window: string, fn: () => Promise<T>, probe?: (api: 1 | 2) => Promise<boolean>): Promise<T>;
  close(keep: boolean): Promise<void>;
}

const ports = async (): Promise<ClusterPorts> => {
  const [api1, api2, postgres, temporal, temporalHistory, temporalMatching, temporalWorker, temporalMetrics, worker1, worker2, ui] = await freePorts(11);
  const [frontend, history, matching, worker] = await freeLowPorts(4);
  return {
    api: [api1!, api2!],
    postgres: postgres!,
    temporal: temporal!,
    temporalHistory: temporalHistory!,
    temporalMatching: temporalMatching!,
    temporalWorker: temporalWorker!,
    membership: { frontend: frontend!, history: history!, matching: matching!, worker: worker! },
    temporalMetrics: temporalMetrics!,
    workerMetrics: [worker1!, worker2!],
    ui: ui!,
  };
};

/**
 * The production topology as `npm run cluster` starts it (the same startCluster, the files under
 * deploy/), on free loopback ports in a scratch directory: PostgreSQL on disk with fsync,
 * the Temporal server and Web UI, two APIs and two workers, logs in files.
 */
export async function startSuite(): Promise<Suite> {
  const logger = createLogger(process.env.CLUSTER_LOG_LEVEL ?? 'warn');
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-cluster-'));
  // PostgreSQL runs as the postgres user when we are root; it must be able to enter the directory.
  chmodSync(dataDir, 0o755);
  const targets = await startTargets();
  const nextBundle = join(dataDir, 'workflows-next.js');
  const bundling = bundleWorkflowCode({
    workflowsPath: fileURLToPath(new URL('./fixtures/workflows-next/index.ts', import.meta.url)),
    ...bundleOptions,
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} },
  }).then(({ code }) => writeFile(nextBundle, code));
  bundling.catch(() => undefined);
  let cluster: Cluster | undefined;
  try {
    const p = await ports();
    const config = loadConfig({
      SVC_DATA_DIR: dataDir,
      SVC_ADMIN_PASSWORD: ADMIN_PASSWORD,
      SVC_ADMIN_APP_PASSWORD: ADMIN_APP_PASSWORD,
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      ...(process.env.TEMPORAL_CLI ? { TEMPORAL_CLI: process.env.TEMPORAL_CLI } : {}),
    });
    cluster = await startCluster({
      config,
      logger,
      dataDir,
      ports: p,
      serviceLogs: 'files',
      supervise: false,
      baseEnv: { ...cleanEnv(), LOG_LEVEL: 'warn', SVC_EGRESS_ALLOW: targets.egressAllow },
    });
    await bundling;
    const started = cluster;
    const document = await (await fetch(`${started.urls.apis[0]}/api/openapi.json`)).json();
    const checker = new OpenApiChecker(document);
    const ledger = new Ledger();
    const clients = started.urls.apis.map((url, i) => new LedgerClient(i + 1, url, checker, ledger));
    const codec = new EncryptionCodec(new KeyRing(parseMasterKey(started.encryptionKey)));
    const connection = await Connection.connect({ address: started.temporalAddress });
    const temporal = new Client({ connection, namespace: config.TEMPORAL_NAMESPACE, dataConverter: clientDataConverter(codec) });
    const pool = new pg.Pool({ connectionString: started.databaseUrl, max: 3 });
    pool.on('error', () => undefined); // a PostgreSQL restart drops idle connections
    const ready = (url: string) => async () => (await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3000) }).catch(() => undefined))?.status === 200;
    return {
      cluster: started,
      logger,
      targets,
      ledger,
      api: (index) => clients[index - 1]!,
      url: (index) => started.urls.apis[index - 1]!,
      checker,
      temporal,
      codec,
      nextBundle,
      async sql(text, params = []) {
        return (await pool.query(text, params)).rows;
      },
      identity: (worker) => `${worker.pid}@${hostname()}`,
      async during(window, fn, probe) {
        ledger.window = window;
        try {
          const result = await fn();
          for (const url of started.urls.apis) await eventually(ready(url), 120_000, `${url} ready after ${window}`);
          // Several in a row: each run lands on one of Temporal's shards, which come back one by one.
          const served = async (api: 1 | 2) => {
            for (let i = 0; i < 8; i++) if (!(await probe!(api))) return false;
            return true;
          };
          if (probe) for (const api of [1, 2] as const) await eventually(() => served(api), 120_000, `API ${api} to serve again after ${window}`);
          return result;
        } finally {
          ledger.window = undefined;
        }
      },
      async close(keep) {
        await pool.end().catch(() => undefined);
        await connection.close().catch(() => undefined);
        await started.stop();
        await targets.close();
        if (keep) process.stderr.write(`cluster suite: state and logs kept in ${dataDir}\n`);
        else rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await cluster?.stop();
    await targets.close();
    process.stderr.write(`cluster suite: the cluster did not start; logs in ${join(dataDir, 'logs')}\n`);
    throw err;
  }
}
