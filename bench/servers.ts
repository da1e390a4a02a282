import { rmSync } from 'node:fs';
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
 * server on free loopback ports; plus a database of the benchmark's own. `pids` names the
 * processes of the servers it started (none for servers given by the environment).
 */
export async function benchServers(name: string, logger: Logger) {
  const stops: (() => Promise<void>)[] = [];
  // The servers' own processes when the benchmark started them (their CPU is read from /proc).
  const pids: { postgres?: number; temporal?: number } = {};
  const scratch: string[] = [];
  let databaseServer = process.env.DATABASE_URL;
  if (!databaseServer) {
    scratch.push(scratchDir('svc-bench-'));
    // Durable, as the embedded default runs it: every commit synced, full page writes. A benchmark
    // of the service with durability on measures what its commits cost too.
    const pg = new EmbeddedPostgres({ dataDir: join(scratch.at(-1)!, 'pg'), port: await freePort(), logger });
    databaseServer = await pg.start();
    pids.postgres = pg.pid;
    stops.push(() => pg.stop());
  }
  let temporalAddress = process.env.TEMPORAL_ADDRESS;
  if (!temporalAddress) {
    // As the embedded default runs it: a SQLite file, the low-latency dynamic config.
    scratch.push(scratchDir('svc-bench-temporal-'));
    const dbFile = join(scratch.at(-1)!, 'temporal.db');
    const server = new TemporalDevServer({
      cli: await provisionTemporalCli(logger, process.env.TEMPORAL_CLI),
      port: await freePort(),
      uiPort: 0,
      headless: true,
      dbFile,
      logger,
    });
    temporalAddress = await server.start();
    pids.temporal = server.pid;
    stops.push(() => server.stop());
  }
  const databaseName = `bench_${name}_${Date.now()}`;
  const databaseUrl = await ensureDatabase(databaseServer, databaseName);
  return {
    databaseUrl,
    /** The server's own `postgres` database: statistics are read there, not in the benchmark's. */
    databaseServer,
    databaseName,
    pids,
    temporalAddress,
    stop: async () => {
      for (const stop of stops.reverse()) await stop();
      for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
    },
  };
}
