import { join } from 'node:path';
import { EmbeddedPostgres } from '../src/platform/embedded-postgres.js';
import type { Logger } from '../src/platform/logger.js';
import { TemporalDevServer, provisionTemporalCli } from '../src/platform/temporal-server.js';
import { ensureDatabase } from '../src/stack.js';
import { freePort } from '../test/helpers/ports.js';
import { scratchDir } from './lib.js';

/**
 * PostgreSQL and Temporal for a benchmark: the servers named by DATABASE_URL / TEMPORAL_ADDRESS,
 * or, as the embedded default runs them, an embedded PostgreSQL and a file-backed Temporal dev
 * server on free loopback ports; plus a database of the benchmark's own.
 */
export async function benchServers(name: string, logger: Logger) {
  const stops: (() => Promise<void>)[] = [];
  let databaseServer = process.env.DATABASE_URL;
  if (!databaseServer) {
    const pg = new EmbeddedPostgres({ dataDir: join(scratchDir('svc-bench-'), 'pg'), port: await freePort(), logger, ephemeral: true });
    databaseServer = await pg.start();
    stops.push(() => pg.stop());
  }
  let temporalAddress = process.env.TEMPORAL_ADDRESS;
  if (!temporalAddress) {
    // As the embedded default runs it: a SQLite file, the low-latency dynamic config.
    const dbFile = join(scratchDir('svc-bench-temporal-'), 'temporal.db');
    const server = new TemporalDevServer({
      cli: await provisionTemporalCli(logger, process.env.TEMPORAL_CLI),
      port: await freePort(),
      uiPort: 0,
      headless: true,
      dbFile,
      logger,
    });
    temporalAddress = await server.start();
    stops.push(() => server.stop());
  }
  const databaseUrl = await ensureDatabase(databaseServer, `bench_${name}_${Date.now()}`);
  return {
    databaseUrl,
    temporalAddress,
    stop: async () => {
      for (const stop of stops.reverse()) await stop();
    },
  };
}
