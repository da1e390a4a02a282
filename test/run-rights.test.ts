import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';

/**
 * Whose rights a run carries. A workflow acts for the people who made it what it is, never for
 * more: its owner and whoever wrote the version that runs (and whoever started it by hand); a
 * run_workflow child acts for the calling run's people too; a record trigger needs the entity's
 * view capability; a connection is used only by its owner and those it is shared with; nesting
 * and fan-out of child runs are bounded. Tried as editors would try it against an administrator.
 */
let app: TestApp;
let alice: TestUser; // editor
let bob: TestUser; // editor
let target: HttpTarget;
const logs: string[] = [];
const W = '/api/workflow/v1';
const M = '/api/management/v1';

beforeAll(async () => {
  app = await startTestApp({ worker: true, logs, env: { SVC_RUN_WORKFLOW_MAX_DEPTH: '3', SVC_RUN_WORKFLOW_MAX_CHILD_RUNS: '5' } });
  target = await startHttpTarget();
  alice = await app.createUser('editor', 'alice');
  bob = await app.createUser('editor', 'bob');
  // An entity only administrators may read or write, with a record in it.
  const vault = await app.admin.post(`${M}/entities`, {
    slug: 'vault',
    name: 'Vault',
    schema: { fields: { secret: { type: 'string' } } },
    capabilities: { view: 'svc_manage_entities', create: 'svc_manage_entities', edit: 'svc_manage_entities', delete: 'svc_manage_entities' },
  });
  expect(vault.status, vault.text).toBe(201);
  expect((await app.admin.post(`${M}/records/vault`, { secret: 'the admin-only secret' })).status).toBe(201);
  expect((await app.admin.post(`${M}/entities`, { slug: 'note', name: 'Note', schema: { fields: { title: { type: 'string' } } } })).status).toBe(201);
});
afterAll(async () => {
  await app?.close();
  await target?.close();
});

type Node = Record<string, unknown>;

async function create(client: TestUser['client'] | TestApp['admin'], nodes: Node[], extra: Record<string, unknown> = {}) {
  const res = await client.post(`${W}/workflows`, { title: `rights ${Math.random()}`, trigger: { type: 'manual' }, nodes, ...extra });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function run(client: TestUser['client'] | TestApp['admin'], id: number) {
  const res = await client.post(`${W}/workflows/${id}/run?wait=true&timeout_ms=90000`, { payload: {} });
  expect(res.status, res.text).toBe(200);
  return (await app.admin.get(`${W}/executions/${res.body.data.execution_id}`)).body.data;
}

const readVault: Node = { id: 'read', type: 'record_query', config: { entity: 'vault' } };

describe('run_workflow', () => {
  it('cannot run a workflow its author cannot see, nor borrow its owner’s rights', async () => {
    const adminsOwn = await create(app.admin, [readVault]);
    expect((await run(app.admin, adminsOwn)).status).toBe('success');
    expect((await alice.client.get(`${W}/workflows/${adminsOwn}`)).status).toBe(404);

    const caller = await create(alice.client, [{ id: 'call', type: 'run_workflow', config: { workflow_id: adminsOwn } }]);
    const execution = await run(alice.client, caller);
    expect(execution.status).toBe('failed');
    expect(execution.timeline[0]).toMatchObject({ status: 'failed', error: { code: 'not_found' } });
    expect(JSON.stringify(execution)).not.toContain('the admin-only secret');
    // Nothing ran as the administrator on Alice's behalf.
    expect(await app.sql('select id from executions where workflow_id = $1 and trigger = $2', [adminsOwn, 'child'])).toEqual([]);
  });

  it('a child shared with the caller runs with the caller’s rights, not its owner’s', async () => {
    const shared = await create(app.admin, [readVault], { shared_with: [alice.id] });
    const caller = await create(alice.client, [{ id: 'call', type: 'run_workflow', config: { workflow_id: shared } }]);
    const execution = await run(alice.client, caller);
    expect(execution.status).toBe('failed');
    expect(JSON.stringify(execution)).not.toContain('the admin-only secret');
    const [child] = await app.sql<{ id: string; status: string }>('select id, status from executions where workflow_id = $1 and trigger = $2', [
      shared,
      'child',
    ]);
    expect(child!.status).toBe('failed');
    const childView = (await app.admin.get(`${W}/executions/${child!.id}`)).body.data;
    expect(childView.timeline[0]).toMatchObject({ node_id: 'read', status: 'failed', error: { code: 'forbidden' } });
  });

  it('nesting is bounded: a workflow that calls itself stops at the depth limit with child_run_limit', async () => {
    const id = await create(alice.client, [{ id: 'again', type: 'run_workflow', config: { workflow_id: 1 } }]);
    expect((await alice.client.patch(`${W}/workflows/${id}`, { nodes: [{ id: 'again', type: 'run_workflow', config: { workflow_id: id } }] })).status).toBe(
      200,
    );
    const execution = await run(alice.client, id);
    expect(execution.status).toBe('failed');
    const runs = await app.sql<{ depth: number }>('select id from executions where workflow_id = $1', [id]);
    // The run and three nested children; the fourth child is refused.
    expect(runs).toHaveLength(4);
    const deepest = await app.sql<{ error: { code: string; message: string } }>(
      `select n.error from execution_nodes n join executions e on e.id = n.execution_id
        where e.workflow_id = $1 and n.error->>'code' = 'child_run_limit'`,
      [id],
    );
    expect(deepest).toHaveLength(1);
    expect(deepest[0]!.error.message).toMatch(/deeper than 3/);
  });

  it('fan-out is bounded: two self-calls per run stop at the child-run budget of the whole tree', async () => {
    const id = await create(alice.client, [{ id: 'x', type: 'transform', config: { value: 1 } }]);
    const twice = [
      { id: 'left', type: 'run_workflow', config: { workflow_id: id }, on_error: 'continue' },
      { id: 'right', type: 'run_workflow', config: { workflow_id: id }, on_error: 'continue' },
    ];
    expect((await alice.client.patch(`${W}/workflows/${id}`, { nodes: twice })).status).toBe(200);
    await run(alice.client, id);
    await eventually(async () => (await app.sql(`select 1 from executions where workflow_id = $1 and status = 'running'`, [id])).length === 0 || undefined);
    const runs = await app.sql('select id from executions where workflow_id = $1', [id]);
    expect(runs.length).toBeLessThanOrEqual(1 + 5);
    const refused = await app.sql(
      `select 1 from execution_nodes n join executions e on e.id = n.execution_id where e.workflow_id = $1 and n.error->>'code' = 'child_run_limit'`,
      [id],
    );
    expect(refused.length).toBeGreaterThan(0);
  });
});

describe('a shared editor', () => {
  it('cannot make the owner’s workflow do what the editor may not: the run carries both their rights', async () => {
    const shared = await create(app.admin, [{ id: 'save', type: 'record_create', config: { entity: 'note', fields: { title: 'by the owner' } } }], {
      shared_with: [alice.id],
    });
    expect((await run(app.admin, shared)).status).toBe('success');
    const edit = await alice.client.patch(`${W}/workflows/${shared}`, {
      nodes: [{ id: 'save', type: 'record_create', config: { entity: 'vault', fields: { secret: 'written through the owner' } } }],
    });
    expect(edit.status, edit.text).toBe(200);
    const execution = await run(app.admin, shared);
    expect(execution.status).toBe('failed');
    expect(execution.timeline[0]).toMatchObject({ status: 'failed', error: { code: 'forbidden' } });
    expect(await app.sql(`select 1 from records.e_vault where secret = 'written through the owner'`)).toEqual([]);
  });

  it('may not change whom the workflow is shared with', async () => {
    const shared = await create(app.admin, [{ id: 't', type: 'transform', config: { value: 1 } }], { shared_with: [alice.id] });
    const widened = await alice.client.patch(`${W}/workflows/${shared}`, { shared_with: [alice.id, bob.id] });
    expect(widened.status).toBe(403);
    expect((await app.admin.get(`${W}/workflows/${shared}`)).body.data.shared_with).toEqual([alice.id]);
    // Sending the list unchanged along with an edit is no change.
    expect((await alice.client.patch(`${W}/workflows/${shared}`, { title: 'renamed', shared_with: [alice.id] })).status).toBe(200);
  });
});

describe('record triggers', () => {
  it('refuse an entity the author cannot read, on create and on activate', async () => {
    const refused = await alice.client.post(`${W}/workflows`, {
      title: 'watch the vault',
      trigger: { type: 'record', config: { entity: 'vault' } },
      nodes: [{ id: 't', type: 'transform', config: { value: '{{ trigger.record }}' } }],
    });
    expect(refused.status, refused.text).toBe(403);
    expect(refused.body.data).toMatchObject({ capability: 'svc_manage_entities' });
    const memo = await app.admin.post(`${M}/entities`, { slug: 'memo', name: 'Memo', schema: { fields: { body: { type: 'string' } } } });
    expect(memo.status).toBe(201);
    const watcher = await create(alice.client, [{ id: 't', type: 'transform', config: { value: '{{ trigger.record.body }}' } }], {
      trigger: { type: 'record', config: { entity: 'memo', events: ['created'] } },
    });
    expect((await app.admin.patch(`${M}/entities/memo`, { capabilities: { view: 'svc_manage_entities' } })).status).toBe(200);
    const activate = await alice.client.post(`${W}/workflows/${watcher}/activate`);
    expect(activate.status).toBe(403);
  });

  it('stop delivering once their author lost the right to read the entity', async () => {
    const diary = await app.admin.post(`${M}/entities`, { slug: 'diary', name: 'Diary', schema: { fields: { body: { type: 'string' } } } });
    expect(diary.status).toBe(201);
    const watcher = await create(alice.client, [{ id: 't', type: 'transform', config: { value: '{{ trigger.record.body }}' } }], {
      trigger: { type: 'record', config: { entity: 'diary', events: ['created'] } },
      status: 'active',
    });
    expect((await app.admin.post(`${M}/records/diary`, { body: 'delivered' })).status).toBe(201);
    await eventually(
      async () => (await app.sql(`select 1 from executions where workflow_id = $1 and status = 'success'`, [watcher])).length === 1 || undefined,
    );
    expect((await app.admin.patch(`${M}/entities/diary`, { capabilities: { view: 'svc_manage_entities' } })).status).toBe(200);
    expect((await app.admin.post(`${M}/records/diary`, { body: 'private from now on' })).status).toBe(201);
    // The trigger saw the record and held it back.
    await eventually(async () =>
      logs.some((line) => line.includes('record trigger not delivered') && JSON.parse(line).workflow_id === watcher) ? true : undefined,
    );
    const runs = await app.sql<{ trigger_payload: unknown }>('select trigger_payload from executions where workflow_id = $1', [watcher]);
    expect(runs).toHaveLength(1);
    expect(JSON.stringify(runs)).not.toContain('private from now on');
  });
});

describe('connections', () => {
  it('are usable by their owner and those they are shared with, when saving and when running', async () => {
    const created = await app.admin.post(`${W}/connections`, {
      type: 'http_bearer',
      label: 'admin api',
      cred: 'admin-token-7',
      extra: { base_url: target.url },
    });
    const id = created.body.data.id as number;
    const node = { id: 'call', type: 'http_request', connection_id: id, config: { method: 'GET', path: '/' } };
    const refused = await alice.client.post(`${W}/workflows`, { title: 'borrow', trigger: { type: 'manual' }, nodes: [node] });
    expect(refused.status).toBe(400);
    expect(refused.body.data.errors).toEqual([expect.objectContaining({ field: 'nodes.0.connection_id' })]);
    // Alice lists only what she may use.
    expect((await alice.client.get(`${W}/connections`)).body.data.items.map((c: { id: number }) => c.id)).not.toContain(id);

    expect((await app.admin.patch(`${W}/connections/${id}`, { shared_with: [alice.id] })).status).toBe(200);
    expect((await alice.client.get(`${W}/connections`)).body.data.items.map((c: { id: number }) => c.id)).toContain(id);
    const workflow = await create(alice.client, [node]);
    expect((await run(alice.client, workflow)).status).toBe('success');
    expect(target.requests.at(-1)!.headers.authorization).toBe('Bearer admin-token-7');

    expect((await app.admin.patch(`${W}/connections/${id}`, { shared_with: [] })).status).toBe(200);
    const after = await run(alice.client, workflow);
    expect(after.status).toBe('failed');
    expect(after.timeline[0]).toMatchObject({ status: 'failed', error: { code: 'forbidden' } });
    // Nor can Bob point an agent session at it.
    const session = await bob.client.post('/api/agent/v1/sessions', { provider_id: id, model_id: 'm' });
    expect(session.status).toBe(400);
  });

  it('may not be shared by an editor, nor managed by one', async () => {
    const created = await app.admin.post(`${W}/connections`, {
      type: 'http_bearer',
      label: 'x',
      cred: 'y',
      extra: { base_url: target.url },
      shared_with: [alice.id],
    });
    expect(created.status, created.text).toBe(201);
    expect(created.body.data.shared_with).toEqual([alice.id]);
    expect((await alice.client.patch(`${W}/connections/${created.body.data.id}`, { shared_with: [alice.id, bob.id] })).status).toBe(403);
  });
});
