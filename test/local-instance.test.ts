import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EmbeddedPostgres } from '../src/platform/embedded-postgres.js';
import { createLogger } from '../src/platform/logger.js';
import { runCli } from './helpers/cli.js';
import { freePort } from './helpers/ports.js';

/**
 * A one-shot command beside a running instance of the same directory: `npm start` on other ports
 * (its PostgreSQL in <data>/pg) or `npm run cluster` (<data>/cluster/pg). The command must use
 * that PostgreSQL, not start a second one on its data directory, nor fail on a password file of
 * the other layout.
 */

const logger = createLogger('silent');
let root: string;
const running: EmbeddedPostgres[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'svc-local-instance-'));
  // The postgres user (when the tests run as root) must reach the data directories.
  await chmod(root, 0o755);
});
afterEach(async () => {
  for (const server of running.splice(0)) await server.stop();
});
afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

async function startPostgres(dataDir: string): Promise<{ port: number; url: string }> {
  const port = await freePort();
  const server = new EmbeddedPostgres({ dataDir, port, logger, ephemeral: true });
  running.push(server);
  const url = await server.start();
  return { port, url };
}

async function logins(serverUrl: string): Promise<string[]> {
  const url = new URL(serverUrl);
  url.pathname = '/svc';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    return (await client.query<{ login: string }>('select login from users order by login')).rows.map((r) => r.login);
  } finally {
    await client.end();
  }
}

const createUser = (env: Record<string, string>, login: string) =>
  runCli(['user', 'create', '--login', login, '--role', 'editor', '--json'], { LOG_LEVEL: 'warn', ...env });

describe('a local command beside a running instance', () => {
  it('finds npm start running on another port from the same directory, and uses its PostgreSQL', async () => {
    const data = join(root, 'embedded');
    const { url } = await startPostgres(join(data, 'pg'));
    // The command's own port setting is another one: it is not what finds the instance.
    const result = await createUser({ SVC_DATA_DIR: data, SVC_EMBEDDED_PG_PORT: String(await freePort()) }, 'beside-start');
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ login: 'beside-start' });
    expect(await logins(url)).toContain('beside-start');
  }, 120_000);

  it('finds npm run cluster from the same directory, with its password and key where the cluster keeps them', async () => {
    const data = join(root, 'clustered');
    const { port, url } = await startPostgres(join(data, 'cluster', 'pg'));
    const result = await createUser({ SVC_DATA_DIR: data, SVC_EMBEDDED_PG_PORT: String(port) }, 'beside-cluster');
    expect(result.code, result.stderr).toBe(0);
    expect(await logins(url)).toContain('beside-cluster');
    // Commands that need the key use the cluster's, not a new one beside npm start's data.
    const keys = await runCli(['license', 'keys', '--json'], { LOG_LEVEL: 'warn', SVC_DATA_DIR: data });
    expect(keys.code, keys.stderr).toBe(0);
    expect((await readFile(join(data, 'cluster', 'encryption.key'), 'utf8')).length).toBeGreaterThan(10);
  }, 120_000);

  it('says in one line what to set when the port is taken by something that does not run from this directory', async () => {
    const port = await freePort();
    const other: Server = createServer(() => undefined);
    await new Promise<void>((resolve) => other.listen(port, '127.0.0.1', resolve));
    try {
      const result = await createUser({ SVC_DATA_DIR: join(root, 'nothing-here'), SVC_EMBEDDED_PG_PORT: String(port) }, 'nobody');
      expect(result.code).toBe(1);
      const lines = result.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain('DATABASE_URL');
      expect(lines[0]).toContain(String(port));
    } finally {
      other.close();
    }
  }, 60_000);
});
