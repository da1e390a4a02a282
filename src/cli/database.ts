import type { MikroORM } from '@mikro-orm/postgresql';
import { join } from 'node:path';
import type { Config } from '../config.js';
import { migrate, openOrm } from '../db/orm.js';
import { isPortOpen } from '../platform/child-process.js';
import { EmbeddedPostgres } from '../platform/embedded-postgres.js';
import type { Logger } from '../platform/logger.js';
import { EMBEDDED_DATABASE, ensureDatabase } from '../stack.js';
import { runningInstances } from './local-instance.js';

/**
 * Runs `fn` with an ORM on the configured database. Without DATABASE_URL it uses the instance
 * that runs from SVC_DATA_DIR (`npm start`, whatever its ports, or `npm run cluster`), else an
 * embedded PostgreSQL started just for this command. `fn` gets the configuration of the instance
 * it works on: SVC_DATA_DIR is the cluster's own directory (its key) when it is the cluster's.
 */
export async function withDatabase<T>(config: Config, logger: Logger, fn: (orm: MikroORM, config: Config) => Promise<T>): Promise<T> {
  let url = config.DATABASE_URL;
  let effective = config;
  let embedded: EmbeddedPostgres | undefined;
  if (!url) {
    const instances = await runningInstances(config.SVC_DATA_DIR);
    // The instance whose data directory SVC_DATA_DIR is comes first: the cluster's is reachable on its own as SVC_DATA_DIR=<data>/cluster.
    const [instance, other] = instances;
    if (instance) {
      if (other) logger.warn(`${other.kind} runs too (port ${other.port}); using ${instance.kind}: set SVC_DATA_DIR=${other.dataDir} for the other`);
      logger.info({ instance: instance.kind, port: instance.port }, `using the PostgreSQL of the running ${instance.kind}`);
      url = await ensureDatabase(instance.serverUrl, EMBEDDED_DATABASE);
      effective = { ...config, SVC_DATA_DIR: instance.dataDir };
    } else if (await isPortOpen(config.SVC_EMBEDDED_PG_PORT)) {
      throw new Error(
        `port ${config.SVC_EMBEDDED_PG_PORT} (SVC_EMBEDDED_PG_PORT) is in use, but no PostgreSQL of the service runs from ${config.SVC_DATA_DIR}: set DATABASE_URL to the service's database, or SVC_DATA_DIR to the directory the running instance was started from`,
      );
    } else {
      embedded = new EmbeddedPostgres({ dataDir: join(config.SVC_DATA_DIR, 'pg'), port: config.SVC_EMBEDDED_PG_PORT, logger });
      url = await ensureDatabase(await embedded.start(), EMBEDDED_DATABASE);
    }
  }
  const orm = await openOrm(url, logger, 2);
  try {
    await migrate(orm);
    return await fn(orm, effective);
  } finally {
    await orm.close(true);
    await embedded?.stop();
  }
}
