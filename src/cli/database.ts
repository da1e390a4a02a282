import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Config } from '../config.js';
import { migrate, openOrm } from '../db/orm.js';
import { isPortOpen } from '../platform/child-process.js';
import { EmbeddedPostgres } from '../platform/embedded-postgres.js';
import type { Logger } from '../platform/logger.js';
import { EMBEDDED_DATABASE, ensureDatabase } from '../stack.js';

/**
 * Runs `fn` with an ORM on the configured database. Without DATABASE_URL it uses the embedded
 * cluster: the running one when `npm start` is up, else one started just for this command.
 */
export async function withDatabase<T>(config: Config, logger: Logger, fn: (orm: MikroORM) => Promise<T>): Promise<T> {
  let url = config.DATABASE_URL;
  let embedded: EmbeddedPostgres | undefined;
  if (!url) {
    const dataDir = join(config.SVC_DATA_DIR, 'pg');
    if (await isPortOpen(config.SVC_EMBEDDED_PG_PORT)) {
      const password = (await readFile(`${dataDir}.password`, 'utf8')).trim();
      url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${config.SVC_EMBEDDED_PG_PORT}/${EMBEDDED_DATABASE}`;
    } else {
      embedded = new EmbeddedPostgres({ dataDir, port: config.SVC_EMBEDDED_PG_PORT, logger });
      url = await ensureDatabase(await embedded.start(), EMBEDDED_DATABASE);
    }
  }
  const orm = await openOrm(url, logger, 2);
  try {
    await migrate(orm);
    return await fn(orm);
  } finally {
    await orm.close(true);
    await embedded?.stop();
  }
}
