import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { migrate, openOrm } from '../src/db/orm.js';
import { EmbeddedPostgres } from '../src/platform/embedded-postgres.js';
import { createLogger } from '../src/platform/logger.js';
import { describeTemporalCli, findTemporalCli } from '../src/platform/temporal-cli.js';
import { TemporalDevServer } from '../src/platform/temporal-server.js';
import { bundleWorkflows } from '../src/temporal/worker.js';
import { freePort } from './helpers/ports.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseServerUrl: string;
    templateDatabase: string;
    temporalAddress: string;
    workflowBundle: string;
  }
}

export const TEMPLATE_DATABASE = 'svc_test_template';

/**
 * One PostgreSQL and one Temporal server for the whole run (the external ones when
 * DATABASE_URL / TEMPORAL_ADDRESS are set), one workflow bundle, and a migrated template
 * database that each test file clones.
 */
export default async function setup(project: TestProject) {
  const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'warn');
  const workDir = await mkdtemp(join(tmpdir(), 'svc-test-'));
  // PostgreSQL runs as the postgres user when we are root; it must be able to enter this dir.
  await chmod(workDir, 0o755);
  const stops: (() => Promise<void>)[] = [];
  const teardown = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
    await rm(workDir, { recursive: true, force: true }).catch(() => undefined);
  };
  try {
    const [databaseServerUrl, temporalAddress, bundle] = await Promise.all([
      (async () => {
        if (process.env.DATABASE_URL) return process.env.DATABASE_URL;
        const server = new EmbeddedPostgres({ dataDir: join(workDir, 'pg'), port: await freePort(), logger, ephemeral: true });
        const url = await server.start();
        stops.push(() => server.stop());
        return url;
      })(),
      (async () => {
        if (process.env.TEMPORAL_ADDRESS) return process.env.TEMPORAL_ADDRESS;
        // The same search as `npm start`; the line below says which source served this run.
        const found = await findTemporalCli(logger, { explicit: process.env.TEMPORAL_CLI });
        process.stderr.write(`${describeTemporalCli(found)}\n`);
        const cli = found.path;
        const server = new TemporalDevServer({ cli, port: await freePort(), uiPort: 0, headless: true, logger });
        const address = await server.start();
        stops.push(() => server.stop());
        return address;
      })(),
      bundleWorkflows(),
    ]);

    const admin = new pg.Client({ connectionString: databaseServerUrl });
    await admin.connect();
    await admin.query(`drop database if exists ${TEMPLATE_DATABASE}`);
    await admin.query(`create database ${TEMPLATE_DATABASE}`);
    await admin.end();
    const templateUrl = new URL(databaseServerUrl);
    templateUrl.pathname = `/${TEMPLATE_DATABASE}`;
    const orm = await openOrm(templateUrl.toString(), logger, 2);
    await migrate(orm);
    await orm.close(true);

    const workflowBundle = join(workDir, 'workflow-bundle.js');
    await writeFile(workflowBundle, bundle.code);

    project.provide('databaseServerUrl', databaseServerUrl);
    project.provide('templateDatabase', TEMPLATE_DATABASE);
    project.provide('temporalAddress', temporalAddress);
    project.provide('workflowBundle', workflowBundle);
  } catch (err) {
    await teardown();
    throw err;
  }
  return teardown;
}
