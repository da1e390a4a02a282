import type { MikroORM } from '@mikro-orm/postgresql';
import { Client } from '@temporalio/client';
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry';
import type { NativeConnection } from '@temporalio/worker';
import { AgentActionStore } from './agent/agent-action.store.js';
import { ApprovalPages } from './approvals/approval-pages.js';
import { ApprovalService } from './approvals/approval.service.js';
import { checkInSandbox } from './approvals/editable-fields.js';
import { AgentGateService } from './agent/agent.gate.js';
import { AgentService } from './agent/agent.service.js';
import { TurnStreamHub } from './agent/agent.stream.js';
import { turnAnsweredAnnouncements } from './agent/agent.turns.js';
import { runClosedAnnouncements, type ClosedRecord } from './executions/run-closed.js';
import { EarlyClaims } from './executions/early-claims.js';
import { EarlyRuns } from './executions/early-runs.js';
import type { RunNodeInput, RunNodeOutput } from '../workflows/defs.js';
import type { Announcements } from './platform/announcements.js';
import { ActingUsers } from './auth/acting.js';
import { AuthService } from './auth/auth.service.js';
import { UserStore } from './auth/user.store.js';
import { UsersService } from './auth/users.service.js';
import type { Config } from './config.js';
import { ConnectionService } from './connections/connection.service.js';
import { openOrm } from './db/orm.js';
import { Sql } from './db/sql.js';
import { ExecutionMirror, type Claim } from './executions/execution.mirror.js';
import { ExecutionItems } from './executions/execution-items.store.js';
import { ExecutionService } from './executions/execution.service.js';
import { ErrorWorkflows } from './executions/error-workflow.js';
import { EventService } from './events/event.service.js';
import { EventStore } from './events/event.store.js';
import { LicenseKeyService } from './licenses/license.keys.js';
import { LicenseWebhookStore } from './licenses/license-webhook.store.js';
import { LicenseWebhookService } from './licenses/license-webhooks.service.js';
import { LicenseService } from './licenses/license.service.js';
import { LicenseStore } from './licenses/license.store.js';
import type { KeyRing } from './platform/crypto.js';
import type { Logger } from './platform/logger.js';
import { EgressPolicy } from './platform/egress.js';
import { Metrics, type PoolProbe } from './platform/metrics.js';
import { PublicUrl } from './platform/public-url.js';
import { installTracing, type Tracing } from './platform/tracing.js';
import { ExpressionSandbox } from './nodes/expression-sandbox.js';
import { RateLimiter } from './platform/rate-limit.js';
import { recordRowTypes } from './records/row-types.js';
import { NotifiedCache } from './platform/notified-cache.js';
import { ENTITY_CHANNEL, EntityService, type StoredEntity } from './records/entity.service.js';
import { RecordEventBus } from './records/record-events.js';
import { RecordValidator } from './records/record-validation.js';
import { RecordService } from './records/record.service.js';
import { connectTemporal, type TemporalHandle } from './temporal/connection.js';
import { clientDataConverter } from './temporal/data-converter.js';
import { WorkflowSchedules } from './workflow-definitions/workflow.schedules.js';
import { HOOKS_KEPT, WORKFLOWS_CHANNEL, WorkflowService, type WorkflowRow } from './workflow-definitions/workflow.service.js';
import { WorkflowFilesService } from './workflow-files/workflow-files.service.js';

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
  /** Workflows as files: export, plan and apply. */
  workflowFiles: WorkflowFilesService;
  /** The executions and execution_nodes tables, for the API and the worker alike. */
  executionMirror: ExecutionMirror;
  /** The items of for_each loops. */
  executionItems: ExecutionItems;
  executions: ExecutionService;
  /** Starts the runs of error workflows that failed runs queued. */
  errorWorkflows: ErrorWorkflows;
  entities: EntityService;
  records: RecordService;
  /** Record created/updated/deleted notifications, published after commit (the workflow `record` trigger). */
  recordEvents: RecordEventBus;
  agent: AgentService;
  /** The agent's side-effect gate: decisions, the inbox, the audit trail. */
  agentGate: AgentGateService;
  /** Events that resume runs waiting for them (POST /events, emit_event). */
  events: EventService;
  /** Workflow approvals on the gate: their views, decisions and approvers' links. */
  approvals: ApprovalService;
  /** The approver's page (GET shows, POST decides). */
  approvalPages: ApprovalPages;
  /** Where people reach the API (the links handed to approvers). */
  publicUrl: PublicUrl;
  /** The one writer of each table (docs/data-access.md). */
  stores: Stores;
  /** LISTEN side of agent turn streams and of runs ended by their last node (one dedicated PostgreSQL connection, opened on first use). */
  agentStreams: TurnStreamHub;
  /** Runs whose last node ended their record, heard on agentStreams' connection (a wait for a result answers from the record). */
  runClosed: Announcements<ClosedRecord | undefined>;
  /** Claims the API made ahead of the first calls of runs it started on this process's worker. */
  earlyClaims: EarlyClaims<Claim>;
  /** The first attempts of runs' first calls the API runs ahead of their activities, for this process's worker. */
  earlyRuns: EarlyRuns<RunNodeInput, RunNodeOutput>;
}

export interface Endpoints {
  databaseUrl: string;
  temporalAddress: string;
}

export interface ServiceOptions {
  /** The clock sessions and nonces expire by; Date.now unless a test moves it on. */
  clock?: () => number;
}

/**
 * The stores: each is the one module that writes its tables (docs/data-access.md). Everything
 * else reaches those tables through them.
 */
export interface Stores {
  users: UserStore;
  /** The gate's actions (the agent's and the workflows' approvals) and their state machine. */
  agentActions: AgentActionStore;
  /** Events and the waits of runs for them. */
  events: EventStore;
  licenseWebhooks: LicenseWebhookStore;
  licenses: LicenseStore;
}

export function createStores(orm: MikroORM, sql: Sql): Stores {
  return {
    users: new UserStore(orm.em, sql),
    agentActions: new AgentActionStore(sql),
    events: new EventStore(sql),
    licenseWebhooks: new LicenseWebhookStore(sql),
    licenses: new LicenseStore(orm.em, sql),
  };
}

/** Seconds a licence signature stays valid (SVC_LICENSE_SIGNATURE_TTL_DAYS). */
const signatureTtl = (config: Config) => Math.round(config.SVC_LICENSE_SIGNATURE_TTL_DAYS * 86_400);

/**
 * What the one-shot commands and the cluster's bootstrap use: the services over the database
 * alone (no Temporal). Licence changes made here still write their webhook deliveries; the
 * worker's sweep starts them.
 */
export function createCommandServices(orm: MikroORM, config: Config) {
  const sql = new Sql(orm.em.getKnex());
  const stores = createStores(orm, sql);
  return {
    users: new UsersService(stores.users),
    licenses: new LicenseService(stores.licenses),
    licenseKeys: (keys: KeyRing) => new LicenseKeyService(sql, keys, signatureTtl(config)),
  };
}

/** What every service stands on: the database and its stores, Temporal, limits, metrics, tracing, egress, expressions. */
type Platform = Pick<
  Services,
  'config' | 'logger' | 'orm' | 'sql' | 'keys' | 'stores' | 'limiter' | 'metrics' | 'tracing' | 'egress' | 'expressions' | 'temporal'
>;

async function createPlatform(config: Config, logger: Logger, keys: KeyRing, endpoints: Endpoints): Promise<Platform> {
  const orm = await openOrm(endpoints.databaseUrl, logger);
  const sql = new Sql(orm.em.getKnex());
  const stores = createStores(orm, sql);
  const metrics = new Metrics({
    pool: () => (orm.em.getKnex().client as { pool?: PoolProbe }).pool,
    pendingActions: () => stores.agentActions.countPending('agent'),
    waitingRuns: () => stores.events.countWaiting(),
    pendingApprovals: () => stores.agentActions.countPending('workflow'),
  });
  const tracing = installTracing({ endpoint: config.OTEL_EXPORTER_OTLP_ENDPOINT, serviceName: config.OTEL_SERVICE_NAME, role: config.SVC_ROLE });
  const expressions = new ExpressionSandbox({
    threads: config.SVC_EXPRESSION_THREADS,
    timeoutMs: config.SVC_EXPRESSION_TIMEOUT_MS,
    memoryMb: config.SVC_EXPRESSION_MEMORY_MB,
    // Room for a configuration whose evaluated output is then refused as output_too_large.
    resultBytes: 4 * config.SVC_NODE_OUTPUT_LIMIT,
  });
  return {
    config,
    logger,
    orm,
    sql,
    keys,
    stores,
    limiter: new RateLimiter(sql),
    metrics,
    tracing,
    egress: EgressPolicy.fromConfig(config),
    expressions,
    temporal: connectTemporal(config, endpoints.temporalAddress, keys, { traced: tracing.enabled }),
  };
}

/** Entities, their records and record events (record tables read dates as text). */
function createRecordServices({ sql, logger }: Platform, endpoints: Endpoints) {
  const recordsDb = sql.withRowTypes(recordRowTypes);
  const entities = new EntityService(recordsDb, new NotifiedCache<StoredEntity>(endpoints.databaseUrl, ENTITY_CHANNEL, { logger }));
  const recordEvents = new RecordEventBus(logger);
  return { entities, recordEvents, records: new RecordService(recordsDb, entities, new RecordValidator(), recordEvents) };
}

/**
 * The executions service, with what it shares with the worker in one process: the announcements
 * of runs their last node ended, and the claims it makes ahead of runs' first calls.
 */
function createExecutions(
  platform: Awaited<ReturnType<typeof createPlatform>>,
  deps: Pick<Services, 'executionMirror' | 'workflows' | 'errorWorkflows' | 'executionItems' | 'agentStreams'>,
  logger: Logger,
) {
  const { sql, temporal, metrics, config } = platform;
  const runClosed = runClosedAnnouncements(deps.agentStreams, logger);
  const earlyClaims = new EarlyClaims<Claim>();
  const earlyRuns = new EarlyRuns<RunNodeInput, RunNodeOutput>((workflowId, nodeId) =>
    logger.error(
      { workflowId, nodeId },
      "A run's first call was made ahead with another input than its activity was given; its outcome stands (a defect to report)",
    ),
  );
  const executions = new ExecutionService(
    sql,
    deps.executionMirror,
    temporal,
    deps.workflows,
    config.SVC_IDEMPOTENCY_TTL_HOURS,
    metrics,
    deps.errorWorkflows,
    config.SVC_HISTORY_INLINE_BYTES,
    config,
    deps.executionItems,
    runClosed,
    earlyClaims,
    // A traced run's call belongs in its activity's span.
    config.SVC_FIRST_CALL_AHEAD && !temporal.traced ? earlyRuns : undefined,
  );
  return { runClosed, earlyClaims, earlyRuns, executions };
}

/** Builds every service of a process (API, worker or both: the entry point chooses what to start). */
export async function createServices(config: Config, logger: Logger, keys: KeyRing, endpoints: Endpoints, options: ServiceOptions = {}): Promise<Services> {
  const platform = await createPlatform(config, logger, keys, endpoints);
  const { sql, stores, limiter, metrics, temporal, egress } = platform;
  const { agentActions } = stores;
  const auth = new AuthService(stores.users, keys, limiter, config, options.clock);
  const acting = new ActingUsers(sql, auth);
  const { entities, records, recordEvents } = createRecordServices(platform, endpoints);
  const executionMirror = new ExecutionMirror(sql, temporal.executionWorkflowPrefix);
  const executionItems = new ExecutionItems(sql);
  const connections = new ConnectionService(sql, keys, egress);
  const schedules = new WorkflowSchedules(temporal);
  const hooks = new NotifiedCache<WorkflowRow>(endpoints.databaseUrl, WORKFLOWS_CHANNEL, { logger, maxEntries: HOOKS_KEPT });
  const workflows = new WorkflowService(sql, schedules, executionMirror, { connections, entities, acting }, hooks);
  const errorWorkflows = new ErrorWorkflows(temporal, logger);
  const agentStreams = new TurnStreamHub(endpoints.databaseUrl, logger, config.SVC_AGENT_MAX_STREAMS_PER_USER);
  const { runClosed, earlyClaims, earlyRuns, executions } = createExecutions(
    platform,
    { executionMirror, workflows, errorWorkflows, executionItems, agentStreams },
    logger,
  );
  const licenseWebhooks = new LicenseWebhookService(stores.licenseWebhooks, keys, temporal, config, logger);
  const publicUrl = new PublicUrl(config.SVC_PUBLIC_URL, config.PORT);
  const approvals = new ApprovalService(sql, agentActions, temporal, keys, acting, auth, publicUrl, checkInSandbox(platform.expressions), metrics);
  return {
    ...platform,
    auth,
    acting,
    users: new UsersService(stores.users),
    connections,
    workflows,
    workflowFiles: new WorkflowFilesService(sql, workflows, schedules, connections, logger),
    executionMirror,
    executionItems,
    executions,
    errorWorkflows,
    licenses: new LicenseService(stores.licenses, licenseWebhooks),
    licenseKeys: new LicenseKeyService(sql, keys, signatureTtl(config)),
    licenseWebhooks,
    entities,
    records,
    recordEvents,
    agent: new AgentService(sql, agentActions, connections, temporal, config, limiter, metrics, turnAnsweredAnnouncements(agentStreams, logger)),
    agentGate: new AgentGateService(sql, agentActions, temporal, { records, entities, workflows, executions }, metrics, approvals),
    events: new EventService(stores.events, temporal, metrics),
    approvals,
    approvalPages: new ApprovalPages(approvals, agentActions, keys, options.clock),
    publicUrl,
    agentStreams,
    runClosed,
    earlyClaims,
    earlyRuns,
  };
}

/**
 * API and worker in one process: runs the API starts begin on this worker at once (a client on
 * the worker's own connection). Answers the function that stops using it.
 */
export function useEagerClient(services: Services, connection: NativeConnection): () => void {
  services.temporal.eagerClient = new Client({
    connection,
    namespace: services.config.TEMPORAL_NAMESPACE,
    dataConverter: clientDataConverter(services.temporal.codec),
    ...(services.temporal.traced ? { interceptors: { workflow: [new OpenTelemetryWorkflowClientInterceptor()] } } : {}),
  });
  return () => void (services.temporal.eagerClient = undefined);
}

export async function closeServices(services: Services): Promise<void> {
  await services.entities.close();
  await services.workflows.close();
  await services.agentStreams.close();
  await services.temporal.connection.close().catch(() => undefined);
  await services.orm.close(true);
  await services.egress.close().catch(() => undefined);
  await services.expressions.close();
  await services.tracing.flush().catch(() => undefined);
}
