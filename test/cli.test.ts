import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { runCli } from './helpers/cli.js';

let app: TestApp;
let env: Record<string, string>;

beforeAll(async () => {
  app = await startTestApp();
  env = { DATABASE_URL: app.databaseUrl, LOG_LEVEL: 'warn' };
});
afterAll(async () => app?.close());

describe('svc CLI', () => {
  it('prints usage', async () => {
    const result = await runCli(['--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('app-password create --login L --name N');
  });

  it('migrate --json prints one JSON object', async () => {
    const result = await runCli(['migrate', '--json'], env);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ applied: [] });
  });

  it('creates a user and an application password that the API then accepts', async () => {
    const user = await runCli(['user', 'create', '--login', 'cli-editor', '--role', 'editor', '--json'], env);
    expect(user.code, user.stderr).toBe(0);
    const created = JSON.parse(user.stdout);
    expect(created).toMatchObject({ login: 'cli-editor', role: 'editor', password: expect.any(String) });

    const pw = await runCli(['app-password', 'create', '--login', 'cli-editor', '--name', 'deploy', '--json'], env);
    expect(pw.code, pw.stderr).toBe(0);
    const lines = pw.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const issued = JSON.parse(lines[0]!);
    expect(Object.keys(issued).sort()).toEqual(['login', 'name', 'password']);

    const client = app.client({ login: 'cli-editor', password: issued.password });
    const me = await client.get('/api/auth/v1/me');
    expect(me.status).toBe(200);
    expect(me.body.data.role).toBe('editor');

    const revoke = await runCli(['app-password', 'revoke', '--login', 'cli-editor', '--name', 'deploy', '--json'], env);
    expect(revoke.code).toBe(0);
    expect((await client.get('/api/auth/v1/me')).status).toBe(401);
  });

  it('fails with a JSON error and a non-zero exit for bad input', async () => {
    const dup = await runCli(['user', 'create', '--login', 'admin', '--role', 'editor', '--json'], env);
    expect(dup.code).toBe(1);
    expect(JSON.parse(dup.stdout)).toMatchObject({ status: 'fail', error: 'conflict' });
    const badRole = await runCli(['user', 'create', '--login', 'someone', '--role', 'emperor', '--json'], env);
    expect(JSON.parse(badRole.stdout)).toMatchObject({ status: 'fail', error: 'validation_failed' });
    const missing = await runCli(['app-password', 'create', '--login', 'admin', '--json'], env);
    expect(JSON.parse(missing.stdout)).toMatchObject({ status: 'fail', message: '--name is required' });
    const unknown = await runCli(['frobnicate'], env);
    expect(unknown.code).toBe(1);
  });
});
