// The pure parts of starting the one-machine cluster (startCluster in cluster.ts): which ports
// must be free, the environments and process specs of its children, how their log lines are
// tagged. No I/O, so they are unit tested on their own (cluster-specs.test.ts).
import { join } from 'node:path';
import type { Config } from '../config.js';
import { ConfigError } from '../config.js';
import type { ProcessSpec } from './process.js';

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

export { mask } from '../platform/logger.js';

/** Temporal stores its membership ports as smallint: each must lie between 1 and 32767. */
export function checkMembershipPorts(ports: ClusterPorts): void {
  const membership = Object.values(ports.membership);
  if (membership.some((p) => p < 1 || p > 32_767))
    throw new ConfigError(
      'TEMPORAL_PORT',
      `Temporal's membership ports (${membership.join(', ')}) must lie between 1 and 32767: Temporal stores them as smallint`,
    );
}

/** The ports that must be free before Temporal's server starts, each named by the setting that moves it. */
export function portsToCheck(ports: ClusterPorts): (readonly [string, number])[] {
  return [
    ['Temporal (TEMPORAL_PORT)', ports.temporal],
    ['Temporal Web UI (TEMPORAL_UI_PORT)', ports.ui],
    ...ports.api.map((port, i) => [`API ${i + 1} (PORT${i ? ` + ${i}` : ''})`, port] as const),
    ...ports.workerMetrics.flatMap((port, i) => (port === 'off' ? [] : [[`worker ${i + 1}'s metrics (SVC_METRICS_PORT${i ? ` + ${i}` : ''})`, port] as const])),
  ];
}

/** What deploy/temporal-setup.sh and Temporal's server read to reach PostgreSQL. */
export function postgresEnv(serverUrl: string): Record<string, string> {
  const pgUrl = new URL(serverUrl);
  return {
    POSTGRES_SEEDS: pgUrl.hostname,
    DB_PORT: pgUrl.port || '5432',
    POSTGRES_USER: decodeURIComponent(pgUrl.username),
    POSTGRES_PWD: decodeURIComponent(pgUrl.password),
  };
}

/** Where the cluster's children are, and what all of them share. */
export interface ClusterLayout {
  /** The cluster's files (deploy/ or a variant). */
  files: string;
  logDir: string;
  projectRoot: string;
  /** PATH (the Temporal binaries first), HOME and XDG_CACHE_HOME: every child's environment starts here. */
  baseChildEnv: Record<string, string>;
  temporalAddress: string;
}

/** Temporal's server, configured from the cluster's files, on the cluster's ports. */
export function temporalServerSpec(layout: ClusterLayout, command: string, ports: ClusterPorts, pgEnv: Record<string, string>): Omit<ProcessSpec, 'ready'> {
  return {
    name: 'temporal-server',
    command,
    args: ['--root', '/', '--config', layout.files, '--env', 'temporal-server', '--allow-no-auth', 'start'],
    cwd: layout.projectRoot,
    env: {
      ...layout.baseChildEnv,
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
      DYNAMIC_CONFIG_FILE_PATH: join(layout.files, 'temporal-dynamicconfig.yaml'),
      LOG_LEVEL: 'info',
    },
    readyTimeoutMs: 120_000,
    logFile: join(layout.logDir, 'temporal-server.log'),
    stopGraceMs: 20_000,
  };
}

/** Temporal's Web UI; the operator's browser calls API 1 for the codec (there is no load balancer on one machine). */
export function temporalUiSpec(
  layout: ClusterLayout,
  command: string,
  ports: ClusterPorts,
  ui: { url: string; namespace: string },
): Omit<ProcessSpec, 'ready'> {
  return {
    name: 'temporal-ui',
    command,
    args: ['--root', '/', '--config', layout.files, '--env', 'temporal-ui', 'start'],
    cwd: layout.projectRoot,
    env: {
      ...layout.baseChildEnv,
      TEMPORAL_ADDRESS: layout.temporalAddress,
      TEMPORAL_UI_HOST: '127.0.0.1',
      TEMPORAL_UI_PORT: String(ports.ui),
      TEMPORAL_UI_URL: ui.url,
      TEMPORAL_DEFAULT_NAMESPACE: ui.namespace,
      TEMPORAL_CODEC_ENDPOINT: `http://localhost:${ports.api[0]}/api/temporal-codec`,
    },
    readyTimeoutMs: 60_000,
    logFile: join(layout.logDir, 'temporal-ui.log'),
  };
}

/** The cluster's endpoints and key, as every API and worker process is given them. */
export interface ServiceEndpoints {
  databaseUrl: string;
  temporalAddress: string;
  uiUrl: string;
  host: Config['HOST'];
  encryptionKey: string;
  workflowBundle: string;
}

/**
 * An API or worker process's environment: the user's (less what would make it another role or
 * give it its own data dir or CLI), the cluster's endpoints and key, and `extra`.
 */
export function serviceEnv(base: NodeJS.ProcessEnv, endpoints: ServiceEndpoints, extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base };
  for (const key of ['SVC_ROLE', 'SVC_DATA_DIR', 'TEMPORAL_CLI']) delete env[key];
  return {
    ...env,
    DATABASE_URL: endpoints.databaseUrl,
    TEMPORAL_ADDRESS: endpoints.temporalAddress,
    TEMPORAL_UI_URL: endpoints.uiUrl,
    HOST: endpoints.host,
    SVC_ENCRYPTION_KEY: endpoints.encryptionKey,
    SVC_WORKFLOW_BUNDLE: endpoints.workflowBundle,
    ...extra,
  };
}

/** A child's stdout line on the command's stdout: a JSON line tagged with its process, anything else as it is. */
export function tagLine(name: string, line: string): string {
  try {
    return JSON.stringify({ process: name, ...JSON.parse(line) });
  } catch {
    return line;
  }
}
