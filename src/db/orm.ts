import { MikroORM, type EntityManager } from '@mikro-orm/postgresql';
import { Migrator } from '@mikro-orm/migrations';
import { AppPassword, Session, User } from '../auth/auth.entities.js';
import { License, LicenseActivation } from '../licenses/license.entities.js';
import { migrations } from '../migrations/index.js';
import type { Logger } from '../platform/logger.js';

export type { EntityManager };
export type Orm = MikroORM;

/** Every fixed-schema entity. Record tables of user-defined entities are not ORM entities. */
export const entities = [User, AppPassword, Session, License, LicenseActivation];

/** Opens the ORM on `url`. Schema changes only ever come from committed migrations. */
export async function openOrm(url: string, logger: Logger, poolMax = 20): Promise<MikroORM> {
  return MikroORM.init({
    clientUrl: url,
    entities,
    extensions: [Migrator],
    migrations: { migrationsList: migrations, transactional: true, allOrNothing: true, snapshot: false },
    pool: { min: 0, max: poolMax },
    allowGlobalContext: false,
    ensureDatabase: false,
    discovery: { checkDuplicateTableNames: true },
    logger: (message) => logger.debug({ orm: true }, message),
    debug: false,
  });
}

/** Arbitrary constant naming the advisory lock that serialises migrations across processes. */
const MIGRATION_LOCK = 7_240_118_001;

/**
 * Applies every pending migration; returns the names applied. Several API and worker processes
 * may start at once, so the run holds a PostgreSQL advisory lock.
 */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const knex = orm.em.getKnex();
  const connection = await knex.client.acquireConnection();
  try {
    await connection.query('select pg_advisory_lock($1)', [MIGRATION_LOCK]);
    const applied = await orm.getMigrator().up();
    return applied.map((m) => m.name);
  } finally {
    await connection.query('select pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    await knex.client.releaseConnection(connection);
  }
}
