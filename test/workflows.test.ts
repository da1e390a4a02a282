import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';

let app: TestApp;
let editor: TestUser;
let other: TestUser;
const W = '/api/workflow/v1/workflows';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  editor = await app.createUser('editor');
  other = await app.createUser('editor');
});
afterAll(async () => app?.close());

const simple = (title: string, extra: Record<string, unknown> = {}) => ({
  title,
  trigger: { type: 'manual' },
  nodes: [{ id: 'a', type: 'transform', config: { value: '{{ trigger.x }}' } }],
  ...extra,
});

describe('definitions', () => {
  it('creates a workflow with a derived slug and returns the full graph', async () => {
    const res = await editor.client.post(W, simple('Sync New Leads!', { description: 'Pull leads from the CRM', tags: ['crm'] }));
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({ slug: 'sync-new-leads', status: 'inactive', trigger_type: 'manual', node_count: 1, version: 1, tags: ['crm'] });
    expect(res.body.data.owner.login).toBe(editor.login);
    const again = await editor.client.post(W, simple('Sync New Leads!'));
    expect(again.body.data.slug).toBe('sync-new-leads-2');
    const taken = await editor.client.post(W, simple('x', { slug: 'sync-new-leads' }));
    expect(taken.status).toBe(409);
  });

  it('lists every problem of an invalid graph', async () => {
    const res = await editor.client.post(W, {
      title: 'Broken',
      trigger: { type: 'schedule', config: { cron: 'not a cron line' } },
      nodes: [
        { id: 'a', type: 'transform', config: { value: 1 } },
        { id: 'a', type: 'transform', config: { value: 2 } },
        { id: 'b', type: 'teleport', config: {} },
        { id: 'c', type: 'http_request', config: { method: 'FETCH', path: '/x' } },
        { id: 'd', type: 'condition', config: { expression: '{{ 1 + }}' } },
        { id: 'e', type: 'http_request', connection_id: 999, config: { method: 'GET', path: '/' } },
      ],
      edges: [
        { from: 'a', to: 'zz' },
        { from: 'd', to: 'a', branch: 'maybe' },
        { from: 'a', to: 'c', branch: 'true' },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('validation_failed');
    const fields = res.body.data.errors.map((e: { field: string }) => e.field);
    expect(fields).toEqual(
      expect.arrayContaining([
        'nodes.1.id',
        'nodes.2.type',
        'nodes.3.config.method',
        'nodes.3.connection_id',
        'nodes.4.config.expression',
        'nodes.5.connection_id',
        'edges.0.to',
        'edges.1.branch',
        'edges.2.branch',
        'trigger.config.cron',
      ]),
    );
  });

  it('refuses cycles', async () => {
    const res = await editor.client.post(W, {
      title: 'Loop',
      trigger: { type: 'manual' },
      nodes: ['a', 'b', 'c'].map((id) => ({ id, type: 'transform', config: { value: 1 } })),
      edges: [
        { from: 'a', to: 'b' },
        { from: 'b', to: 'c' },
        { from: 'c', to: 'a' },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body.message).toContain('cycle');
  });

  it('answers wrong types and unknown fields with 400 naming them', async () => {
    const res = await editor.client.post(W, { title: 42, trigger: { type: 'manual' }, nodes: 'none', colour: 'red' });
    expect(res.status).toBe(400);
    const fields = res.body.data.errors.map((e: { field: string }) => e.field);
    expect(fields).toEqual(expect.arrayContaining(['title', 'nodes', 'colour']));
  });

  it('patches partially, validates again and increments the version', async () => {
    const created = (await editor.client.post(W, simple('Versioned'))).body.data;
    const patched = await editor.client.patch(`${W}/${created.id}`, { title: 'Versioned v2', nodes: [{ id: 'a', type: 'transform', config: { value: 2 } }] });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ title: 'Versioned v2', version: 2, slug: created.slug });
    const bad = await editor.client.patch(`${W}/${created.id}`, { edges: [{ from: 'a', to: 'nope' }] });
    expect(bad.status).toBe(400);
    expect((await editor.client.get(`${W}/${created.id}`)).body.data.version).toBe(2);
    expect((await editor.client.patch(`${W}/${created.id}`, {})).status).toBe(400);
  });

  it('keeps runs in flight on the version they started with', async () => {
    const created = (
      await editor.client.post(W, {
        title: 'Slow then fast',
        trigger: { type: 'manual' },
        nodes: [
          { id: 'wait', type: 'delay', config: { duration_ms: 1500 } },
          { id: 'out', type: 'transform', config: { value: 'v1' } },
        ],
        edges: [{ from: 'wait', to: 'out' }],
      })
    ).body.data;
    const run = await editor.client.post(`${W}/${created.id}/run`, { payload: {} });
    expect(run.status).toBe(202);
    await editor.client.patch(`${W}/${created.id}`, {
      nodes: [
        { id: 'wait', type: 'delay', config: { duration_ms: 1500 } },
        { id: 'out', type: 'transform', config: { value: 'v2' } },
      ],
    });
    const result = await app.stack.services.executions.waitForResult(app.stack.services.temporal.executionWorkflowId(run.body.data.execution_id), 60_000);
    expect(result?.lastOutput).toBe('v1');
    const view = await editor.client.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`);
    expect(view.body.data.workflow_version).toBe(1);
  });
});

describe('lifecycle: activate is idempotent, DELETE archives, DELETE with force=true purges an archived workflow', () => {
  it('activates idempotently, deactivates, archives on DELETE, restores and purges with force', async () => {
    const { id } = (await editor.client.post(W, simple('Lifecycle'))).body.data;
    const first = await editor.client.post(`${W}/${id}/activate`);
    const second = await editor.client.post(`${W}/${id}/activate`);
    expect(first.status).toBe(200);
    expect(second.body.data.status).toBe('active');
    expect(second.body.data.version).toBe(first.body.data.version);
    expect((await editor.client.post(`${W}/${id}/deactivate`)).body.data.status).toBe('inactive');

    expect((await editor.client.delete(`${W}/${id}?force=true`)).status).toBe(409); // purge needs archived first
    const archived = await editor.client.delete(`${W}/${id}`);
    expect(archived.status).toBe(200);
    expect(archived.body.data).toEqual({ id, status: 'archived' });
    expect((await editor.client.get(`${W}/${id}`)).body.data.status).toBe('archived');
    expect((await editor.client.post(`${W}/${id}/run`, { payload: {} })).status).toBe(409);
    expect((await editor.client.patch(`${W}/${id}`, { title: 'x' })).status).toBe(409);
    expect((await editor.client.post(`${W}/${id}/deactivate`)).status).toBe(409);
    expect((await editor.client.post(`${W}/${id}/restore`)).body.data.status).toBe('inactive');

    await editor.client.delete(`${W}/${id}`);
    const purged = await editor.client.delete(`${W}/${id}?force=true`);
    expect(purged.body.data).toEqual({ id, status: 'purged' });
    expect((await editor.client.get(`${W}/${id}`)).status).toBe(404);
  });

  it('activate works from archived too (any state -> active)', async () => {
    const { id } = (await editor.client.post(W, simple('From archive'))).body.data;
    await editor.client.delete(`${W}/${id}`);
    expect((await editor.client.post(`${W}/${id}/activate`)).body.data.status).toBe('active');
  });

  it('purges the executions of a purged workflow', async () => {
    const { id } = (await editor.client.post(W, simple('Purge runs'))).body.data;
    const run = await editor.client.post(`${W}/${id}/run?wait=true&timeout_ms=90000`, { payload: { x: 1 } });
    expect(run.status).toBe(200);
    await editor.client.delete(`${W}/${id}`);
    await editor.client.delete(`${W}/${id}?force=true`);
    expect(await app.sql('select id from executions where workflow_id = $1', [id])).toEqual([]);
  });
});

describe('listing', () => {
  it('filters by status, tag and full-text q, paginates, and shows only visible workflows', async () => {
    const mine = await app.createUser('editor');
    const c = mine.client;
    await c.post(W, simple('Invoice reminders', { description: 'Email customers whose invoices are overdue', tags: ['billing'] }));
    const active = (await c.post(W, simple('Nightly backup', { description: 'Copy the database', tags: ['ops'] }))).body.data;
    await c.post(`${W}/${active.id}/activate`);
    for (let i = 0; i < 3; i++) await c.post(W, simple(`Filler ${i}`, { tags: ['ops'] }));

    const all = await c.get(W);
    expect(all.body.data.total).toBe(5);
    expect(all.body.data.items[0]).toEqual({
      id: expect.any(Number),
      slug: expect.any(String),
      title: 'Filler 2',
      status: 'inactive',
      trigger_type: 'manual',
      node_count: 1,
      description: '',
      tags: ['ops'],
    });
    expect((await c.get(`${W}?status=active`)).body.data.items.map((i: { title: string }) => i.title)).toEqual(['Nightly backup']);
    expect((await c.get(`${W}?tag=billing`)).body.data.total).toBe(1);
    expect((await c.get(`${W}?q=overdue%20invoices`)).body.data.items.map((i: { title: string }) => i.title)).toEqual(['Invoice reminders']);
    const page = await c.get(`${W}?per_page=2&page=2`);
    expect(page.body.data).toMatchObject({ total: 5, page: 2, per_page: 2 });
    expect(page.body.data.items).toHaveLength(2);
    expect((await c.get(`${W}?per_page=101`)).status).toBe(400);
    expect((await c.get(`${W}?page=0`)).status).toBe(400);
    expect((await c.get(`${W}?status=deleted`)).status).toBe(400);
    // Another editor sees none of these; the administrator sees them all.
    expect((await other.client.get(`${W}?tag=billing`)).body.data.total).toBe(0);
    expect((await app.admin.get(`${W}?tag=billing`)).body.data.total).toBeGreaterThanOrEqual(1);
  });

  it('uses the full-text index, not a scan', async () => {
    // Tiny tables are scanned anyway; with sequential scans off the planner must find the index.
    const client = new pg.Client({ connectionString: app.databaseUrl });
    await client.connect();
    try {
      await client.query('set enable_seqscan = off');
      const plan = await client.query(`explain select id from workflows w where w.search @@ websearch_to_tsquery('english', 'invoice')`);
      expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('workflows_search_idx');
    } finally {
      await client.end();
    }
  });

  it("hides other users' workflows (404) unless shared with them", async () => {
    const owner = await app.createUser('editor');
    const viewer = await app.createUser('subscriber');
    const viewerId = (await viewer.client.get('/api/auth/v1/me')).body.data.id;
    const { id } = (await owner.client.post(W, simple('Private'))).body.data;
    expect((await viewer.client.get(`${W}/${id}`)).status).toBe(404);
    expect((await other.client.patch(`${W}/${id}`, { title: 'mine now' })).status).toBe(404);
    await owner.client.patch(`${W}/${id}`, { shared_with: [viewerId] });
    const seen = await viewer.client.get(`${W}/${id}`);
    expect(seen.status).toBe(200);
    expect(seen.body.data.title).toBe('Private');
    // A subscriber may look but not run or change.
    expect((await viewer.client.post(`${W}/${id}/run`, { payload: {} })).status).toBe(403);
  });

  it('lets an editor it is shared with edit a workflow, not archive, restore or purge it', async () => {
    const owner = await app.createUser('editor');
    const colleague = await app.createUser('editor');
    const colleagueId = (await colleague.client.get('/api/auth/v1/me')).body.data.id;
    const { id } = (await owner.client.post(W, { ...simple('Shared, not given away'), shared_with: [colleagueId] })).body.data;
    expect((await colleague.client.patch(`${W}/${id}`, { description: 'edited by a colleague' })).status).toBe(200);
    for (const path of [`${W}/${id}`, `${W}/${id}?force=true`]) {
      const res = await colleague.client.delete(path);
      expect(res.status, path).toBe(403);
      expect(res.body).toMatchObject({ error: 'forbidden', message: expect.stringContaining("Only the workflow's owner") });
    }
    expect((await owner.client.get(`${W}/${id}`)).body.data.status).toBe('inactive');
    expect((await owner.client.delete(`${W}/${id}`)).body.data).toEqual({ id, status: 'archived' });
    expect((await colleague.client.post(`${W}/${id}/restore`)).status).toBe(403);
    expect((await colleague.client.delete(`${W}/${id}?force=true`)).status).toBe(403);
    expect((await owner.client.get(`${W}/${id}`)).body.data.status).toBe('archived');
    // An administrator manages every workflow.
    expect((await app.admin.post(`${W}/${id}/restore`)).body.data.status).toBe('inactive');
    await app.admin.delete(`${W}/${id}`);
    expect((await app.admin.delete(`${W}/${id}?force=true`)).body.data).toEqual({ id, status: 'purged' });
  });
});
