import { safeEqual } from './crypto.js';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * The service's Prometheus metrics, one registry per process (see docs/operators.md, "Metrics and
 * traces", for every series). Label values are bounded: route templates never URLs, node types
 * from the catalogue, outcomes and error codes from fixed lists, never ids.
 */

const seconds = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const longSeconds = [0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 86_400];

/** What a pool can say about itself (tarn, under knex). */
export interface PoolProbe {
  numUsed(): number;
  numFree(): number;
  numPendingAcquires(): number;
}

export class Metrics {
  readonly registry = new Registry();

  readonly httpRequests = new Counter({
    name: 'svc_http_requests_total',
    help: 'HTTP requests answered, by route template, method and status',
    labelNames: ['route', 'method', 'status'] as const,
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: 'svc_http_request_duration_seconds',
    help: 'Time to answer an HTTP request (to its last byte for an event stream), by route template, method and status',
    labelNames: ['route', 'method', 'status'] as const,
    buckets: seconds,
    registers: [this.registry],
  });
  readonly runsStarted = new Counter({
    name: 'svc_runs_started_total',
    help: 'Workflow runs begun on a worker, by trigger (manual, webhook, schedule, record, replay, child)',
    labelNames: ['trigger'] as const,
    registers: [this.registry],
  });
  readonly runsFinished = new Counter({
    name: 'svc_runs_finished_total',
    help: 'Workflow runs finished, by status (success, failed, partial, cancelled)',
    labelNames: ['status'] as const,
    registers: [this.registry],
  });
  readonly runDuration = new Histogram({
    name: 'svc_run_duration_seconds',
    help: 'Time from a run’s start to its end, by status',
    labelNames: ['status'] as const,
    buckets: longSeconds,
    registers: [this.registry],
  });
  readonly nodeDuration = new Histogram({
    name: 'svc_node_duration_seconds',
    help: 'Time one attempt of a node took, by node type and outcome (success, failed, cancelled)',
    labelNames: ['type', 'outcome'] as const,
    buckets: seconds,
    registers: [this.registry],
  });
  readonly nodeAttempts = new Counter({
    name: 'svc_node_attempts_total',
    help: 'Attempts of nodes, by node type and outcome; a failed attempt carries its error code',
    labelNames: ['type', 'outcome', 'code'] as const,
    registers: [this.registry],
  });
  readonly replays = new Counter({
    name: 'svc_replays_total',
    help: 'Replays started, by mode (reset: Temporal resets the run to a node; rerun: a new run with a payload; rerun_seeded: a new run reusing upstream outputs)',
    labelNames: ['mode'] as const,
    registers: [this.registry],
  });
  readonly agentTurns = new Counter({
    name: 'svc_agent_turns_total',
    help: 'Agent turn segments ended (a message or a decision), by outcome (answered, gate_pending, failed)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly agentDecisionSeconds = new Histogram({
    name: 'svc_agent_decision_seconds',
    help: 'Time from a gated action’s request to its decision, by decision (approved, rejected)',
    labelNames: ['decision'] as const,
    buckets: longSeconds,
    registers: [this.registry],
  });
  readonly agentActions = new Counter({
    name: 'svc_agent_actions_total',
    help: 'Gated actions that reached their final status (approved, rejected, expired)',
    labelNames: ['status'] as const,
    registers: [this.registry],
  });
  readonly workflowWaits = new Counter({
    name: 'svc_workflow_waits_total',
    help: 'wait_for_event nodes that ended, by outcome (received, timeout)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly workflowEvents = new Counter({
    name: 'svc_workflow_events_total',
    help: 'Events sent, by source (api, node) and whether they resumed a run (delivered: yes, no)',
    labelNames: ['source', 'delivered'] as const,
    registers: [this.registry],
  });
  readonly workflowApprovals = new Counter({
    name: 'svc_workflow_approvals_total',
    help: 'Workflow approvals that ended, by outcome (approved, rejected, expired, cancelled)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly workflowApprovalSeconds = new Histogram({
    name: 'svc_workflow_approval_decision_seconds',
    help: 'Time from a workflow approval’s request to its end, by outcome (approved, rejected, expired)',
    labelNames: ['outcome'] as const,
    buckets: longSeconds,
    registers: [this.registry],
  });
  readonly workflowApprovalNotices = new Counter({
    name: 'svc_workflow_approval_notifications_total',
    help: 'Approval notifications posted, by notice (requested, reminder, escalated) and outcome (sent, failed)',
    labelNames: ['notice', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly modelTokens = new Counter({
    name: 'svc_model_tokens_total',
    help: 'Model tokens reported by providers, by provider (openai, anthropic), direction (in, out) and source (agent, node)',
    labelNames: ['provider', 'direction', 'source'] as const,
    registers: [this.registry],
  });
  readonly modelCost = new Counter({
    name: 'svc_model_cost_usd_total',
    help: 'Cost of model calls in USD by the price table (SVC_AGENT_PRICES), by provider and source',
    labelNames: ['provider', 'source'] as const,
    registers: [this.registry],
  });
  readonly licenseRequests = new Counter({
    name: 'svc_license_requests_total',
    help: 'Licence portal requests, by endpoint (activate, verify, deactivate) and outcome (ok, or the error code)',
    labelNames: ['endpoint', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly licenseRateLimited = new Counter({
    name: 'svc_license_rate_limited_total',
    help: 'Licence portal requests refused by the per-address rate limit',
    registers: [this.registry],
  });

  constructor(
    options: {
      pool?: () => PoolProbe | undefined;
      pendingActions?: () => Promise<number>;
      /** Runs waiting in a wait_for_event node, and workflow approvals waiting for a decision. */
      waitingRuns?: () => Promise<number>;
      pendingApprovals?: () => Promise<number>;
    } = {},
  ) {
    collectDefaultMetrics({ register: this.registry });
    const pool = options.pool;
    if (pool) {
      new Gauge({
        name: 'svc_db_pool_connections',
        help: 'PostgreSQL connections of this process’s pool, by state (used, free, waiting: requests waiting for one)',
        labelNames: ['state'] as const,
        registers: [this.registry],
        collect() {
          const probe = pool();
          if (!probe) return;
          this.set({ state: 'used' }, probe.numUsed());
          this.set({ state: 'free' }, probe.numFree());
          this.set({ state: 'waiting' }, probe.numPendingAcquires());
        },
      });
    }
    const pending = options.pendingActions;
    if (pending) {
      new Gauge({
        name: 'svc_agent_pending_actions',
        help: 'Gated agent actions waiting for a decision (read from PostgreSQL when scraped)',
        registers: [this.registry],
        async collect() {
          this.set(await pending().catch(() => Number.NaN));
        },
      });
    }
    for (const [name, help, read] of [
      ['svc_workflow_waiting_runs', 'Runs waiting for an event in a wait_for_event node (read from PostgreSQL when scraped)', options.waitingRuns],
      ['svc_workflow_pending_approvals', 'Workflow approvals waiting for a decision (read from PostgreSQL when scraped)', options.pendingApprovals],
    ] as const) {
      if (!read) continue;
      new Gauge({
        name,
        help,
        registers: [this.registry],
        async collect() {
          this.set(await read().catch(() => Number.NaN));
        },
      });
    }
  }

  /**
   * The text exposition: this registry, then what `extra` answers (the Temporal SDK's own
   * metrics, served by its core on a loopback port) when it can be read.
   */
  async text(extra?: () => Promise<string | undefined>): Promise<string> {
    const ours = await this.registry.metrics();
    const theirs = await extra?.().catch(() => undefined);
    return theirs ? `${ours}\n${theirs}` : ours;
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** The answer to a caller `mayReadMetrics` refuses. */
export const METRICS_REFUSAL = 'Metrics are served to loopback clients, or with the metrics token (SVC_METRICS_TOKEN)';

/**
 * Who may read the metrics: a client connecting from a loopback address (the socket's own
 * address, never a forwarded one), or one presenting `Authorization: Bearer <token>` when a token
 * is set (SVC_METRICS_TOKEN).
 */
export function mayReadMetrics(request: { remoteAddress: string | undefined; authorization: string | undefined }, token: string | undefined): boolean {
  const address = (request.remoteAddress ?? '').replace(/^::ffff:/, '');
  if (/^127\./.test(address) || address === '::1') return true;
  if (!token) return false;
  const presented = /^Bearer\s+(\S+)$/i.exec(request.authorization ?? '')?.[1] ?? '';
  return safeEqual(presented, token);
}

/** Tokens and cost of one model call, by the connection's type (openai, anthropic) and where it came from. */
export function countModelUse(
  metrics: Pick<Metrics, 'modelTokens' | 'modelCost'>,
  provider: string,
  source: 'agent' | 'node',
  usage: { tokens_in?: number; tokens_out?: number; cost_usd?: number },
): void {
  metrics.modelTokens.inc({ provider, direction: 'in', source }, usage.tokens_in ?? 0);
  metrics.modelTokens.inc({ provider, direction: 'out', source }, usage.tokens_out ?? 0);
  metrics.modelCost.inc({ provider, source }, usage.cost_usd ?? 0);
}
