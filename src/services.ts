import type { MikroORM } from '@mikro-orm/postgresql';
import { AgentGateService } from './agent/agent.gate.js';
import { AgentService } from './agent/agent.service.js';
import { TurnStreamHub } from './agent/agent.stream.js';
import { ActingUsers } from './auth/acting.js';
import { AuthService } from './auth/auth.service.js';
import { UsersService } from './auth/users.service.js';
import type { Config } from './config.js';
import { ConnectionService } from './connections/connection.service.js';
import { openOrm } from './db/orm.js';
import { Sql } from './db/sql.js';
import { ExecutionMirror } from './executions/execution.mirror.js';
import { ExecutionService } from './executions/execution.service.js';
import { LicenseKeyService } from './licenses/license.keys.js';
import { LicenseWebhookService } from './licenses/license-webhooks.service.js';
import { LicenseService } from './licenses/license.service.js';
import type { KeyRing } from './platform/crypto.js';
import type { Logger } from './platform/logger.js';
import { EgressPolicy } from './platform/egress.js';
import { Metrics, type PoolProbe } from './platform/metrics.js';
import { installTracing, type Tracing } from './platform/tracing.js';
import { ExpressionSandbox } from './nodes/expression-sandbox.js';
import { RateLimiter } from './platform/rate-limit.js';
import { recordRowTypes } from './records/row-types.js';
import { EntityCache } from './records/entity-cache.js';
import { EntityService, type StoredEntity } from './records/entity.service.js';
import { RecordEventBus } from './records/record-events.js';
import { RecordValidator } from './records/record-validation.js';
import { RecordService } from './records/record.service.js';
import { connectTemporal, type TemporalHandle } from './temporal/connection.js';
import { WorkflowSchedules } from './workflow-definitions/workflow.schedules.js';
import { WorkflowService } from './workflow-definitions/workflow.service.js';

/** Everything a route, activity or command needs, built once per process and passed explicitly. */
export interface Services {
  config: Config;
  logger: Logger;
  orm: MikroORM;
  /** Plain SQL with bound parameters, for queries the ORM does not model. */
  sql: Sql;
  keys: KeyRing;
  limiter: RateLimiter;
  /** Every outbound call made for a user goes through it (SVC_EGRESS_ALLOW). */
  egress: EgressPolicy;
  /** This process's Prometheus metrics. */
  metrics: Metrics;
  /** OpenTelemetry tracing (on when OTEL_EXPORTER_OTLP_ENDPOINT is set). */
  tracing: Tracing;
  /** Evaluates workflow expressions on worker threads, bounded in time and memory. */
  expressions: ExpressionSandbox;
  auth: AuthService;
  /** The people a run acts for, and the rights they hold together. */
  acting: ActingUsers;
  users: UsersService;
  licenses: LicenseService;
  /** The Ed25519 keys that sign activate and verify answers. */
  licenseKeys: LicenseKeyService;
  /** Vendor webhooks on licence events and their deliveries. */
  licenseWebhooks: LicenseWebhookService;
  temporal: TemporalHandle;
  connections: ConnectionService;
  workflows: WorkflowService;
  /** The executions and execution_nodes tables, for the API and the worker alike. */
  executionMirror: ExecutionMirror;
  executions: ExecutionService;
  entities: EntityService;
  records: RecordService;
  /** Record created/updated/deleted notifications, published after commit (the workflow `record` trigger). */
  recordEvents: RecordEventBus;
  agent: AgentService;
  /** The agent's side-effect gate: decisions, the inbox, the audit trail. */
  agentGate: AgentGateService;
  /** LISTEN side of agent turn streams (one dedicated PostgreSQL connection, opened on first use). */
  agentStreams: TurnStreamHub;
}

export interface Endpoints {
  databaseUrl: string;
  temporalAddress: string;
}

export interface ServiceOptions {
  /** The clock sessions and nonces expire by; Date.now unless a test moves it on. */
  clock?: () => number;
}

export async function createServices(config: Config, logger: Logger, keys: KeyRing, endpoints: Endpoints, options: ServiceOptions = {}): Promise<Services> {
  const orm = await openOrm(endpoints.databaseUrl, logger);
  const em = orm.em;
  const sql = new Sql(em.getKnex());
  const limiter = new RateLimiter(sql);
  const metrics = new Metrics({
    pool: () => (em.getKnex().client as { pool?: PoolProbe }).pool,
    pendingActions: async () => {
      const [row] = await sql.query<{ n: number }>(`select count(*)::int as n from agent_actions where status = 'pending'`);
      return row!.n;
    },
  });
  const tracing = installTracing({ endpoint: config.OTEL_EXPORTER_OTLP_ENDPOINT, serviceName: config.OTEL_SERVICE_NAME, role: config.SVC_ROLE });
  const temporal = connectTemporal(config, endpoints.temporalAddress, keys, { traced: tracing.enabled });
  const executionMirror = new ExecutionMirror(sql, temporal.executionWorkflowPrefix);
  const auth = new AuthService(em, sql, keys, limiter, config, options.clock);
  const acting = new ActingUsers(sql, auth);
  const recordsDb = sql.withRowTypes(recordRowTypes);
  const entityCache = new EntityCache<StoredEntity>(endpoints.databaseUrl, logger);
  const entities = new EntityService(recordsDb, entityCache);
  const recordEvents = new RecordEventBus(logger);
  const egress = EgressPolicy.fromConfig(config);
  const connections = new ConnectionService(sql, keys, egress);
  const workflows = new WorkflowService(sql, new WorkflowSchedules(temporal), executionMirror, { connections, entities, acting });
  const licenseWebhooks = new LicenseWebhookService(sql, keys, temporal, config, logger);
  const records = new RecordService(recordsDb, entities, new RecordValidator(), recordEvents);
  const executions = new ExecutionService(sql, executionMirror, temporal, workflows, config.SVC_IDEMPOTENCY_TTL_HOURS, metrics);
  return {
    config,
    logger,
    orm,
    sql,
    keys,
    limiter,
    metrics,
    tracing,
    egress,
    expressions: new ExpressionSandbox({
      threads: config.SVC_EXPRESSION_THREADS,
      timeoutMs: config.SVC_EXPRESSION_TIMEOUT_MS,
      memoryMb: config.SVC_EXPRESSION_MEMORY_MB,
      // Room for a configuration whose evaluated output is then refused as output_too_large.
      resultBytes: 4 * config.SVC_NODE_OUTPUT_LIMIT,
    }),
    auth,
    acting,
    users: new UsersService(em),
    temporal,
    connections,
    workflows,
    executionMirror,
    executions,
    licenses: new LicenseService(em, sql, licenseWebhooks),
    licenseKeys: new LicenseKeyService(sql, keys, Math.round(config.SVC_LICENSE_SIGNATURE_TTL_DAYS * 86_400)),
    licenseWebhooks,
    entities,
    records,
    recordEvents,
    agent: new AgentService(sql, connections, temporal, config, limiter, metrics),
    agentGate: new AgentGateService(sql, temporal, { records, entities, workflows, executions }, metrics),
    agentStreams: new TurnStreamHub(endpoints.databaseUrl, logger, config.SVC_AGENT_MAX_STREAMS_PER_USER),
  };
}

export async function closeServices(services: Services): Promise<void> {
  await services.entities.close();
  await services.agentStreams.close();
  await services.temporal.connection.close().catch(() => undefined);
  await services.orm.close(true);
  await services.egress.close().catch(() => undefined);
  await services.expressions.close();
  await services.tracing.flush().catch(() => undefined);
}
