import { z } from 'zod';
import type { Queryable } from '../db/sql.js';
import type { TemporalHandle } from '../temporal/connection.js';

interface HealthPorts {
  sql: Queryable;
  temporal: TemporalHandle;
  metrics: Metrics;
  config: Pick<Config, 'SVC_METRICS_TOKEN'>;
}
import { temporalHealthy } from '../temporal/connection.js';
import type { Config } from '../config.js';
import { METRICS_REFUSAL, mayReadMetrics, type Metrics } from '../platform/metrics.js';
import { temporalSdkMetrics } from '../temporal/worker.js';
import { AppError } from '../platform/errors.js';
import { defineRoute, type AnyRoute } from './route.js';

async function postgresHealthy(services: HealthPorts): Promise<boolean> {
  try {
    await Promise.race([services.sql.query('select 1'), new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 2000))]);
    return true;
  } catch {
    return false;
  }
}

export function healthRoutes(services: HealthPorts, openApi: () => unknown): AnyRoute[] {
  const dependencies = z.object({ postgresql: z.enum(['up', 'down']), temporal: z.enum(['up', 'down']) });
  return [
    defineRoute({
      method: 'get',
      path: '/healthz',
      operationId: 'liveness',
      summary: 'Liveness: the process answers',
      description: 'Answers as long as the process serves HTTP, whatever the state of PostgreSQL and Temporal (for a container liveness probe).',
      tag: 'health',
      access: 'public',
      responses: { 200: { description: 'Alive', data: z.object({ live: z.literal(true) }) } },
      handler: async () => ({ data: { live: true } }),
    }),
    defineRoute({
      method: 'get',
      path: '/readyz',
      operationId: 'readiness',
      summary: 'Readiness: PostgreSQL and Temporal are reachable',
      description:
        'Checks both within about 2 seconds. When one is down the answer is 503 `service_unavailable` whose `data` says which (for a load balancer or readiness probe).',
      tag: 'health',
      access: 'public',
      responses: { 200: { description: 'Ready', data: dependencies } },
      handler: async () => {
        const [pg, temporal] = await Promise.all([postgresHealthy(services), temporalHealthy(services.temporal)]);
        const state = { postgresql: pg ? 'up' : 'down', temporal: temporal ? 'up' : 'down' } as const;
        if (!pg || !temporal) throw new AppError('service_unavailable', 'A dependency is unavailable', state, { 'Retry-After': '5' });
        return { data: state };
      },
    }),
    defineRoute({
      method: 'get',
      path: '/metrics',
      operationId: 'metrics',
      summary: 'Prometheus metrics of this process, in the text exposition format',
      description:
        'For clients connecting from a loopback address, or with `Authorization: Bearer <SVC_METRICS_TOKEN>` when that is set; anyone else gets 403. In a process that also runs a worker, the Temporal SDK’s own metrics (`temporal_*`) follow the service’s (`svc_*`, process defaults).',
      tag: 'health',
      access: 'public',
      errors: { forbidden: 'Not a loopback client and no valid metrics token' },
      responses: { 200: { description: 'The metrics', raw: z.string(), contentType: 'text/plain' } },
      handler: async ({ ctx }) => {
        if (
          !mayReadMetrics(
            { remoteAddress: ctx.req.socket.remoteAddress, authorization: ctx.get('authorization') || undefined },
            services.config.SVC_METRICS_TOKEN,
          )
        ) {
          throw new AppError('forbidden', METRICS_REFUSAL);
        }
        ctx.type = services.metrics.contentType;
        return { raw: await services.metrics.text(temporalSdkMetrics) };
      },
    }),
    defineRoute({
      method: 'get',
      path: '/api/openapi.json',
      operationId: 'openApi',
      summary: 'This OpenAPI 3.1 document',
      description:
        'Generated from the same route definitions that validate requests. An event-stream answer (`text/event-stream`) is described by the schema of one event (docs/api.md).',
      tag: 'health',
      access: 'public',
      responses: { 200: { description: 'The document', raw: z.object({ openapi: z.string() }).loose() } },
      handler: async () => ({ raw: openApi() }),
    }),
  ];
}
