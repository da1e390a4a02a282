import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { loadConfig, type Config } from '../../src/config.js';
import { buildApp } from '../../src/http/app.js';
import { buildOpenApi } from '../../src/http/openapi.js';
import { generateMasterKey } from '../../src/platform/crypto.js';
import { createLogger } from '../../src/platform/logger.js';
import { startStack, type Stack } from '../../src/stack.js';
import { OpenApiChecker } from './openapi-check.js';
import { TARGET_HOST } from './http-target.js';
import { HttpClient, type Credentials } from './http.js';

export const ADMIN_PASSWORD = 'admin-password-for-tests';
export const ADMIN_APP_PASSWORD = 'abcd efgh ijkm npqr stuv wxyz';

export interface TestUser {
  id: number;
  login: string;
  password: string;
  appPassword: string;
  client: HttpClient;
}

export interface TestApp {
  url: string;
  stack: Stack;
  config: Config;
  databaseUrl: string;
  /** Basic-auth client of the bootstrapped administrator. */
  admin: HttpClient;
  anonymous: HttpClient;
  client(credentials?: Credentials): HttpClient;
  createUser(role: 'administrator' | 'editor' | 'subscriber', login?: string): Promise<TestUser>;
  /** Direct SQL on the file's own database, for asserting what is stored. */
  sql<T = Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

/** Clones the migrated template into a database of this test file's own. */
async function cloneDatabase(): Promise<string> {
  const serverUrl = inject('databaseServerUrl');
  const name = `svc_test_${randomBytes(6).toString('hex')}`;
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`create database ${name} template ${inject('templateDatabase')}`);
  } finally {
    await client.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/**
 * Starts the real service (the same startStack as `npm start`) against the shared PostgreSQL
 * and Temporal servers, on its own database and task queue. Every response the returned
 * clients receive is checked against the OpenAPI document.
 */
export interface TestAppOptions {
  /** Run the Temporal worker in this process too. */
  worker?: boolean;
  /** Configuration overrides. */
  env?: Record<string, string>;
  /** Collects the JSON log lines. */
  logs?: string[];
  /** Reuse another app's database (a second API process, a restart). */
  databaseUrl?: string;
  /**
   * Let the stack start what the configuration leaves unset, as `npm start` does: with
   * `env.TEMPORAL_ADDRESS: ''`, its own Temporal dev server with the Web UI and codec listener.
   */
  embedded?: boolean;
  /** The clock sessions and nonces expire by, for a test that moves time on instead of waiting. */
  clock?: () => number;
}

export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const databaseUrl = options.databaseUrl ?? (await cloneDatabase());
  const config = loadConfig({
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    DATABASE_URL: databaseUrl,
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    TEMPORAL_TASK_QUEUE: `test-${randomBytes(6).toString('hex')}`,
    // Test files share one Temporal namespace; ids must not collide between their databases.
    SVC_INSTANCE_ID: `t-${randomBytes(6).toString('hex')}`,
    SVC_ENCRYPTION_KEY: generateMasterKey(),
    SVC_ADMIN_PASSWORD: ADMIN_PASSWORD,
    SVC_ADMIN_APP_PASSWORD: ADMIN_APP_PASSWORD,
    PORT: '0',
    HOST: '127.0.0.1',
    // The suite's HTTP targets and fake model providers listen there; nothing else on loopback is reachable.
    SVC_EGRESS_ALLOW: TARGET_HOST,
    ...options.env,
  });
  const logs = options.logs;
  const logger = logs ? createLogger('debug', { write: (line: string) => void logs.push(line) }) : createLogger(config.LOG_LEVEL);
  const stack = await startStack(config, logger, {
    embedded: options.embedded ?? false,
    roles: { api: true, worker: options.worker ?? false },
    workflowBundle: inject('workflowBundle'),
    ...(options.clock ? { clock: options.clock } : {}),
  });
  const url = stack.urls.api!;
  const checker = new OpenApiChecker(buildOpenApi(buildApp(stack.services).routes, 'test'));
  const client = (credentials?: Credentials) => new HttpClient(url, checker, credentials);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  let users = 0;
  return {
    url,
    stack,
    config,
    databaseUrl,
    admin: client({ login: 'admin', password: ADMIN_APP_PASSWORD }),
    anonymous: client(),
    client,
    async createUser(role, login = `${role}${++users}`) {
      const password = `pw-${randomBytes(8).toString('hex')}`;
      const created = await stack.services.users.createUser({ login, role, password });
      const app = await stack.services.users.createAppPassword(login, 'tests');
      return { id: created.id, login, password, appPassword: app.password, client: client({ login, password: app.password }) };
    },
    async sql(text, params = []) {
      return (await pool.query(text, params)).rows;
    },
    async close() {
      await pool.end();
      await stack.stop();
    },
  };
}
