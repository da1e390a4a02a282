import { join, relative } from 'node:path';
import type { Config } from '../config.js';
import type { Logger } from '../platform/logger.js';
import { untilStopped } from '../platform/signals.js';
import { clusterPorts, startCluster } from './cluster.js';

/** How many of each `npm run cluster` starts. */
export const CLUSTER_APIS = 2;
export const CLUSTER_WORKERS = 2;

/**
 * `npm run cluster` (`svc cluster`): the production topology on this machine, in the foreground
 * like `npm start`. State is kept under `<SVC_DATA_DIR>/cluster/`; Ctrl-C stops everything in
 * reverse order, a second Ctrl-C kills what is left at once.
 */
export async function runClusterCommand(config: Config, logger: Logger, json: boolean): Promise<void> {
  const dataDir = join(config.SVC_DATA_DIR, 'cluster');
  const cluster = await startCluster({
    config,
    logger,
    dataDir,
    ports: clusterPorts(config, CLUSTER_APIS, CLUSTER_WORKERS),
    serviceLogs: 'stdout',
    supervise: true,
  });
  logger.info({ ...cluster.urls, admin_created: Boolean(cluster.adminPassword) }, 'cluster ready');
  if (!json) {
    const pad = (label: string) => `  ${label}`.padEnd(20);
    const lines = [
      'Workflow automation service is up (cluster: 2 APIs, 2 workers, Temporal server on PostgreSQL).',
      ...cluster.urls.apis.map((url, i) => `${pad(`API ${i + 1}:`)}${url}${i === 0 ? `  (OpenAPI: ${url}/api/openapi.json)` : ''}`),
      `${pad('Temporal Web UI:')}${cluster.urls.ui}  (decodes through API 1's /api/temporal-codec: sign in with an application password)`,
      `${pad('Temporal:')}${cluster.urls.temporal}  (metrics: ${cluster.urls.temporalMetrics})`,
      `${pad('Metrics:')}the APIs' /metrics${cluster.urls.workerMetrics.length ? `, the workers' ${cluster.urls.workerMetrics.join(' ')}` : ''}`,
      `${pad('PostgreSQL:')}${cluster.urls.database}  (Temporal's: temporal, temporal_visibility)`,
      `${pad('Processes:')}${[...cluster.apis, ...cluster.workers, cluster.temporal, cluster.ui].map((p) => `${p.name} ${p.pid}`).join(', ')}${cluster.postgres ? `, postgres ${cluster.postgres.pid()}` : ''}`,
      `${pad('Logs:')}${relative(process.cwd(), cluster.urls.logs) || '.'}/  (Temporal, Web UI, schema; API and worker lines here)`,
      cluster.adminPassword && `  Created user "admin" with password: ${cluster.adminPassword}  (shown once)`,
      `  One-shot commands (npm run svc -- <command>) run from this directory use this cluster's PostgreSQL and key`,
      '  Ctrl-C stops everything.',
    ];
    process.stderr.write(lines.filter(Boolean).join('\n') + '\n');
  }
  await untilStopped(logger, {
    stop: () => cluster.stop(),
    atOnce: () => void cluster.killAll().finally(() => process.exit(130)),
  });
  logger.info('stopped');
}
