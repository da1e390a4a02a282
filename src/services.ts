import type { MikroORM } from '@mikro-orm/postgresql';
import { AgentService } from './agent/agent.service.js';
import { TurnStreamHub } from './agent/agent.stream.js';
import { AuthService } from './auth/auth.service.js';
import { UsersService } from './auth/users.service.js';
import type { Config } from './config.js';
import { ConnectionService } from './connections/connection.service.js';
import { openOrm } from './db/orm.js';
import { Sql } from './db/sql.js';
import { ExecutionService } from './executions/execution.service.js';
import { LicenseService } from './licenses/license.service.js';
import type { KeyRing } from './platform/crypto.js';
import type { Logger } from './platform/logger.js';
import { RateLimiter } from './platform/rate-limit.js';
import { RecordsDatabase } from './records/database.js';
import { EntityCache } from './records/entity-cache.js';
import { EntityService, type StoredEntity } from './records/entity.service.js';
import { RecordEventBus } from './records/record-events.js';
import { RecordValidator } from './records/record-validation.js';
import { RecordService } from './records/record.service.js';
import { connectTemporal, type TemporalHandle } from './temporal/connection.js';
import { WorkflowSchedules } from './workflows/workflow.schedules.js';
import { WorkflowService } from './workflows/workflow.service.js';

/** Everything a route, activity or command needs, built once per process and passed explicitly. */
export interface Services {
  config: Config;
  logger: Logger;
  orm: MikroORM;
  /** Plain SQL with bound parameters, for queries the ORM does not model. */
  sql: Sql;
  keys: KeyRing;
  limiter: RateLimiter;
  auth: AuthService;
  users: UsersService;
  licenses: LicenseService;
  temporal: TemporalHandle;
  connections: ConnectionService;
  workflows: WorkflowService;
  executions: ExecutionService;
  entities: EntityService;
  records: RecordService;
  /** Record created/updated/deleted notifications, published after commit (the workflow `record` trigger). */
  recordEvents: RecordEventBus;
  agent: AgentService;
  /** LISTEN side of agent turn streams (one dedicated PostgreSQL connection, opened on first use). */
  agentStreams: TurnStreamHub;
}

export interface Endpoints {
  databaseUrl: string;
  temporalAddress: string;
}

export async function createServices(config: Config, logger: Logger, keys: KeyRing, endpoints: Endpoints): Promise<Services> {
  const orm = await openOrm(endpoints.databaseUrl, logger);
  const em = orm.em;
  const limiter = new RateLimiter(em.getKnex());
  const sql = new Sql(em.getKnex());
  const temporal = connectTemporal(config, endpoints.temporalAddress, keys);
  const workflows = new WorkflowService(sql, new WorkflowSchedules(temporal));
  const recordsDb = new RecordsDatabase(em.getKnex());
  const entityCache = new EntityCache<StoredEntity>(endpoints.databaseUrl, logger);
  const entities = new EntityService(recordsDb, entityCache);
  const recordEvents = new RecordEventBus(logger);
  const connections = new ConnectionService(em, sql, keys);
  return {
    config,
    logger,
    orm,
    sql,
    keys,
    limiter,
    auth: new AuthService(em, sql, keys, limiter, config),
    users: new UsersService(em),
    temporal,
    connections,
    workflows,
    executions: new ExecutionService(sql, temporal, workflows),
    licenses: new LicenseService(em),
    entities,
    records: new RecordService(recordsDb, entities, new RecordValidator(), recordEvents),
    recordEvents,
    agent: new AgentService(sql, connections, temporal, config),
    agentStreams: new TurnStreamHub(endpoints.databaseUrl, logger),
  };
}

export async function closeServices(services: Services): Promise<void> {
  await services.entities.close();
  await services.agentStreams.close();
  await services.temporal.connection.close().catch(() => undefined);
  await services.orm.close(true);
}
