import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_APP_PASSWORD, startTestApp, type TestApp } from './helpers/app.js';
import { runCli } from './helpers/cli.js';
import { freePort } from './helpers/ports.js';

/** `svc workflows ...` as CI runs it: a folder, a server URL, the credentials in the environment. */

let app: TestApp;
let dir: string;
let env: Record<string, string>;
const W = '/api/workflow/v1';

const svc = (...args: string[]) => runCli(['workflows', ...args, '--dir', dir, '--server', app.url], env);

beforeAll(async () => {
  app = await startTestApp();
  dir = await mkdtemp(join(tmpdir(), 'svc-workflow-files-'));
  env = { SVC_LOGIN: 'admin', SVC_APP_PASSWORD: ADMIN_APP_PASSWORD, LOG_LEVEL: 'warn' };
  await app.admin.post(`${W}/connections`, { type: 'http_bearer', label: 'CRM', cred: 'sk-test-0000', extra: { base_url: 'http://127.0.0.2:9' } });
  await app.admin.post(`${W}/workflows`, {
    title: 'Greeter',
    slug: 'greeter',
    trigger: { type: 'manual' },
    nodes: [{ id: 'hello', type: 'transform', config: { value: { greeting: 'Hello, {{ trigger.name }}' } } }],
  });
});
afterAll(async () => {
  await app?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('svc workflows', () => {
  it('exports, validates and plans nothing to change (exit 0)', async () => {
    const exported = await svc('export');
    expect(exported.code, exported.stderr).toBe(0);
    expect(await readdir(dir)).toEqual(['greeter.yaml']);
    expect((await svc('validate')).code).toBe(0);
    const plan = await svc('plan');
    expect(plan.code, plan.stderr).toBe(0);
    expect(plan.stdout).toContain('0 to create, 0 to update, 0 to archive, 1 unchanged');
  });

  it('plans a change with exit 2 and its diff, applies exactly that plan, then plans nothing', async () => {
    const file = join(dir, 'greeter.yaml');
    await writeFile(file, (await readFile(file, 'utf8')).replace('title: Greeter', 'title: Greeter, edited'));
    await writeFile(
      join(dir, 'caller.yaml'),
      'slug: caller\ntitle: Caller\ntrigger: {type: manual}\nnodes:\n  - {id: call, type: run_workflow, config: {workflow: greeter}}\n  - {id: fetch, type: http_request, connection: CRM, config: {method: GET, path: /}}\n',
    );
    const plan = await svc('plan');
    expect(plan.code, plan.stderr).toBe(2);
    expect(plan.stdout).toContain('1 to create, 1 to update, 0 to archive, 0 unchanged');
    expect(plan.stdout).toContain('-title: Greeter\n+title: Greeter, edited\n');
    const hash = /Plan hash: ([0-9a-f]{64})/.exec(plan.stdout)![1]!;
    const json = await svc('plan', '--json');
    expect(JSON.parse(json.stdout).plan_hash).toBe(hash);

    const applied = await svc('apply', '--plan', hash);
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toContain('create caller, update greeter');
    expect((await svc('plan')).code).toBe(0);
  });

  it('refuses a stale plan with exit 1 and applies nothing', async () => {
    const file = join(dir, 'greeter.yaml');
    await writeFile(file, (await readFile(file, 'utf8')).replace('title: Greeter, edited', 'title: Greeter again'));
    const hash = JSON.parse((await svc('plan', '--json')).stdout).plan_hash;
    await writeFile(file, (await readFile(file, 'utf8')).replace('title: Greeter again', 'title: Greeter, once more'));
    const stale = await svc('apply', '--plan', hash);
    expect(stale.code).toBe(1);
    expect(stale.stderr).toContain('changed since plan');
    const [row] = await app.sql<{ title: string }>(`select title from workflows where slug = 'greeter'`);
    expect(row!.title).toBe('Greeter, edited');
  });

  it('lists every problem with file, line and field, offline and on the server, with exit 1', async () => {
    const broken = await mkdtemp(join(tmpdir(), 'svc-workflow-files-bad-'));
    try {
      await writeFile(join(broken, 'a.yaml'), 'slug: a\ntitle: A\ntrigger: {type: manual}\nnodes:\n  - {id: x, type: nope}\nedges:\n  - {from: x, to: y}\n');
      await writeFile(join(broken, 'b.yaml'), 'slug: b\ntitle: [\n');
      const offline = await runCli(['workflows', 'validate', '--dir', broken], env);
      expect(offline.code).toBe(1);
      expect(offline.stderr).toContain('a.yaml:5  nodes.0.type: unknown node type "nope"');
      expect(offline.stderr).toContain('a.yaml:7  edges.0.to: no node "y"');
      expect(offline.stderr).toMatch(/b\.yaml:\d+: YAML/);
      const online = await runCli(['workflows', 'plan', '--dir', broken, '--server', app.url], env);
      expect(online.code).toBe(1);
      expect(online.stderr).toContain('nothing applied');
      expect(online.stderr).toContain('a.yaml:5  nodes.0.type');
    } finally {
      await rm(broken, { recursive: true, force: true });
    }
  });

  it('takes credentials only from the environment or a prompt, and says in one line what is wrong', async () => {
    const none = await runCli(['workflows', 'plan', '--dir', dir, '--server', app.url], { LOG_LEVEL: 'warn' });
    expect(none.code).toBe(1);
    expect(none.stderr.trim().split('\n')).toHaveLength(1);
    expect(none.stderr).toContain('SVC_APP_PASSWORD');
    const wrong = await runCli(['workflows', 'plan', '--dir', dir, '--server', app.url], { ...env, SVC_APP_PASSWORD: 'not it' });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('refused the credentials of admin (401)');
    // The service's own configuration is not read: a value it would refuse changes nothing here
    // (its exit code 2 would read as "changes" in CI).
    const unrelated = await runCli(['workflows', 'plan', '--dir', dir, '--server', app.url], { ...env, SVC_ROLE: 'nonsense' });
    expect(unrelated.stderr).not.toContain('Configuration error');
    expect(unrelated.stdout).toContain('Plan for');
    expect([0, 2]).toContain(unrelated.code);
    const down = await runCli(['workflows', 'plan', '--dir', dir, '--server', `http://127.0.0.1:${await freePort()}`], env);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('cannot reach');
  });
});
