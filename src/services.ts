import type { MikroORM } from '@mikro-orm/postgresql';
import { AuthService } from './auth/auth.service.js';
import { UsersService } from './auth/users.service.js';
import type { Config } from './config.js';
import { openOrm } from './db/orm.js';
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

/** Everything a route, activity or command needs, built once per process and passed explicitly. */
export interface Services {
  config: Config;
  logger: Logger;
  orm: MikroORM;
  keys: KeyRing;
  limiter: RateLimiter;
  auth: AuthService;
  users: UsersService;
  temporal: TemporalHandle;
  entities: EntityService;
  records: RecordService;
  /** Record created/updated/deleted notifications, published after commit (the workflow `record` trigger). */
  recordEvents: RecordEventBus;
}

export interface Endpoints {
  databaseUrl: string;
  temporalAddress: string;
}

export async function createServices(config: Config, logger: Logger, keys: KeyRing, endpoints: Endpoints): Promise<Services> {
  const orm = await openOrm(endpoints.databaseUrl, logger);
  const em = orm.em;
  const limiter = new RateLimiter(em.getKnex());
  const recordsDb = new RecordsDatabase(em.getKnex());
  const entityCache = new EntityCache<StoredEntity>(endpoints.databaseUrl, logger);
  const entities = new EntityService(recordsDb, entityCache);
  const recordEvents = new RecordEventBus(logger);
  return {
    config,
    logger,
    orm,
    keys,
    limiter,
    auth: new AuthService(em, keys, limiter, config),
    users: new UsersService(em),
    temporal: connectTemporal(config, endpoints.temporalAddress),
    entities,
    records: new RecordService(recordsDb, entities, new RecordValidator(), recordEvents),
    recordEvents,
  };
}

export async function closeServices(services: Services): Promise<void> {
  await services.entities.close();
  await services.temporal.connection.close().catch(() => undefined);
  await services.orm.close(true);
}
