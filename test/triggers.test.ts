import { ScheduleNotFoundError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it, vi, type MockInstance } from 'vitest';
import { Sql } from '../src/db/sql.js';
import { NotifiedCache } from '../src/platform/notified-cache.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

let app: TestApp;
const W = '/api/workflow/v1/workflows';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
});
afterAll(async () => app?.close());

describe('webhook trigger', () => {
  async function hookWorkflow(respond: 'execution' | 'last_node') {
    const created = await app.admin.post(W, {
      title: `Hook ${respond}`,
      trigger: { type: 'webhook', config: { respond } },
      nodes: [{ id: 'reply', type: 'transform', config: { value: { got: '{{ trigger.name }}' } } }],
    });
    expect(created.status).toBe(201);
    return created.body.data;
  }

  it('runs only while active and only with the secret, from a header or the query', async () => {
    const workflow = await hookWorkflow('execution');
    expect(workflow.webhook.url).toMatch(new RegExp(`/api/workflow/v1/hooks/${workflow.slug}$`));
    const url = `/api/workflow/v1/hooks/${workflow.slug}`;
    const secret = workflow.webhook.secret as string;
    expect((await app.anonymous.post(url, { name: 'x' }, { headers: { 'x-webhook-secret': secret } })).status).toBe(404); // inactive
    await app.admin.post(`${W}/${workflow.id}/activate`);
    // A wrong or missing secret gets the same answer as a slug that is not an active hook, so a
    // caller cannot learn which slugs are active.
    const missing = await app.anonymous.post(url, { name: 'x' });
    const wrong = await app.anonymous.post(url, { name: 'x' }, { headers: { 'x-webhook-secret': 'wrong' } });
    const unknown = await app.anonymous.post('/api/workflow/v1/hooks/no-such-hook', { name: 'x' }, { headers: { 'x-webhook-secret': 'wrong' } });
    for (const res of [missing, wrong]) {
      expect(res.status).toBe(404);
      expect(res.body).toEqual(unknown.body);
    }
    const viaHeader = await app.anonymous.post(url, { name: 'header' }, { headers: { 'x-webhook-secret': secret } });
    expect(viaHeader.status).toBe(202);
    const viaQuery = await app.anonymous.post(`${url}?secret=${encodeURIComponent(secret)}`, { name: 'query' });
    expect(viaQuery.status).toBe(202);
    const execution = await eventually(async () => {
      const v = (await app.admin.get(`/api/workflow/v1/executions/${viaHeader.body.data.execution_id}`)).body.data;
      return v.status === 'success' ? v : undefined;
    });
    expect(execution).toMatchObject({ trigger: 'webhook', trigger_payload: { name: 'header' }, output: { got: 'header' } });
    expect((await app.anonymous.post('/api/workflow/v1/hooks/no-such-hook', {}, { headers: { 'x-webhook-secret': secret } })).status).toBe(404);
    await app.admin.post(`${W}/${workflow.id}/deactivate`);
    expect((await app.anonymous.post(url, { name: 'x' }, { headers: { 'x-webhook-secret': secret } })).status).toBe(404);
  });

  it("answers with the last node's output when the trigger says respond: last_node", async () => {
    const workflow = await hookWorkflow('last_node');
    await app.admin.post(`${W}/${workflow.id}/activate`);
    const res = await app.anonymous.post(
      `/api/workflow/v1/hooks/${workflow.slug}`,
      { name: 'Ada' },
      { headers: { 'x-webhook-secret': workflow.webhook.secret } },
    );
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ status: 'success', output: { got: 'Ada' } });
  });

  it('shows the secret only to the owner and administrators', async () => {
    const owner = await app.createUser('editor');
    const viewer = await app.createUser('subscriber');
    const viewerId = (await viewer.client.get('/api/auth/v1/me')).body.data.id;
    const created = await owner.client.post(W, {
      title: 'Shared hook',
      trigger: { type: 'webhook' },
      shared_with: [viewerId],
      nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }],
    });
    expect(created.body.data.webhook.secret).toEqual(expect.any(String));
    expect((await viewer.client.get(`${W}/${created.body.data.id}`)).body.data.webhook).toBeNull();
  });
});

describe("the workflow a webhook names, kept in the API's memory", () => {
  const hookPath = (slug: string) => `/api/workflow/v1/hooks/${slug}`;
  let hook: { id: number; slug: string; secret: string };
  const call = (slug = hook.slug) => app.anonymous.post(hookPath(slug), { name: 'x' }, { headers: { 'x-webhook-secret': hook.secret } });
  // The statements that look a webhook's workflow up by its slug.
  let lookups: MockInstance<Sql['query']>;
  const slugReads = () => lookups.mock.calls.filter(([text]) => text.includes('where w.slug = ?')).length;

  beforeAll(async () => {
    lookups = vi.spyOn(Sql.prototype, 'query');
    const created = await app.admin.post(W, {
      title: 'Kept hook',
      status: 'active',
      trigger: { type: 'webhook' },
      nodes: [{ id: 'reply', type: 'transform', config: { value: { got: '{{ trigger.name }}' } } }],
    });
    expect(created.status).toBe(201);
    hook = { id: created.body.data.id, slug: created.body.data.slug, secret: created.body.data.webhook.secret };
    // Kept once the API listens for changes, which a loaded machine can take seconds to begin.
    await vi.waitFor(
      async () => {
        expect((await call()).status).toBe(202);
        lookups.mockClear();
        expect((await call()).status).toBe(202);
        expect(slugReads()).toBe(0);
      },
      { timeout: 15_000, interval: 100 },
    );
  });
  afterAll(() => lookups.mockRestore());

  it('applies a change made through the same API to the very next call, without waiting to hear of it', async () => {
    // Not announced, for this test: only the API's own change can drop what it keeps.
    await app.sql('alter table workflows disable trigger workflows_announce_change');
    try {
      await madeThroughTheApi();
    } finally {
      await app.sql('alter table workflows enable trigger workflows_announce_change');
    }
  });

  async function madeThroughTheApi() {
    expect((await app.admin.post(`${W}/${hook.id}/deactivate`)).status).toBe(200);
    expect((await call()).status).toBe(404);
    expect((await app.admin.post(`${W}/${hook.id}/activate`)).status).toBe(200);
    expect((await call()).status).toBe(202);

    // A new version: the next run is of it.
    const saved = await app.admin.patch(`${W}/${hook.id}`, { nodes: [{ id: 'reply', type: 'transform', config: { value: { v: 2 } } }] });
    expect(saved.status).toBe(200);
    const started = await call();
    expect(started.status).toBe(202);
    const [run] = await app.sql<{ workflow_version: number }>('select workflow_version from executions where id = $1', [started.body.data.execution_id]);
    expect(run!.workflow_version).toBe(saved.body.data.version);

    // A new slug: the old one names nothing from the next call on.
    const renamed = `${hook.slug}-renamed`;
    expect((await app.admin.patch(`${W}/${hook.id}`, { slug: renamed })).status).toBe(200);
    expect((await call()).status).toBe(404);
    expect((await call(renamed)).status).toBe(202);
    expect((await app.admin.patch(`${W}/${hook.id}`, { slug: hook.slug })).status).toBe(200);
    expect((await call(renamed)).status).toBe(404);
    expect((await call()).status).toBe(202);
  }

  it('hears a change made by another writer (another API process, a file applied, SQL)', async () => {
    await call();
    await app.sql(`update workflows set status = 'inactive' where id = $1`, [hook.id]);
    await vi.waitFor(async () => expect((await call()).status).toBe(404), { timeout: 15_000, interval: 50 });
    await app.sql(`update workflows set status = 'active' where id = $1`, [hook.id]);
    await vi.waitFor(async () => expect((await call()).status).toBe(202), { timeout: 15_000, interval: 50 });

    // The row shows its owner's login: a login changed drops it too.
    lookups.mockClear();
    await call();
    expect(slugReads()).toBe(0);
    await app.sql(`update users set login = login where id = (select owner_id from workflows where id = $1)`, [hook.id]);
    await vi.waitFor(
      async () => {
        lookups.mockClear();
        await call();
        expect(slugReads()).toBe(1);
      },
      { timeout: 15_000, interval: 50 },
    );
  });

  it('keeps nothing while its listening connection is down, and a change made meanwhile is not missed', async () => {
    await call();
    const [killed] = await app.sql<{ n: number }>(
      `select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where datname = current_database() and query = 'listen svc_workflows'`,
    );
    expect(killed!.n).toBeGreaterThan(0);
    await app.sql(`update workflows set status = 'inactive' where id = $1`, [hook.id]);
    await vi.waitFor(async () => expect((await call()).status).toBe(404), { timeout: 15_000, interval: 50 });
    await app.sql(`update workflows set status = 'active' where id = $1`, [hook.id]);
    await vi.waitFor(async () => expect((await call()).status).toBe(202), { timeout: 15_000, interval: 50 });
    // Listening again: kept again.
    await vi.waitFor(
      async () => {
        await call();
        lookups.mockClear();
        await call();
        expect(slugReads()).toBe(0);
      },
      { timeout: 15_000, interval: 100 },
    );
  });

  it('keeps at most its bound, the least recently used going first, and never a value not found', async () => {
    const cache = new NotifiedCache<number>(app.databaseUrl, 'svc_test_kept', { maxEntries: 2 });
    try {
      let loads = 0;
      const value = (v: number | undefined) => async () => ((loads += 1), v);
      await vi.waitFor(
        async () => {
          await cache.get('a', value(1));
          expect(cache.size).toBe(1);
        },
        { timeout: 15_000, interval: 100 },
      );
      await cache.get('b', value(2));
      await cache.get('a', value(1));
      await cache.get('c', value(3));
      expect(cache.size).toBe(2);
      loads = 0;
      expect(await cache.get('a', value(1))).toBe(1);
      expect(await cache.get('c', value(3))).toBe(3);
      expect(loads).toBe(0);
      expect(await cache.get('b', value(2))).toBe(2);
      expect(loads).toBe(1);

      loads = 0;
      expect(await cache.get('none', value(undefined))).toBeUndefined();
      expect(await cache.get('none', value(undefined))).toBeUndefined();
      expect(loads).toBe(2);

      // An announcement naming a key drops that key; an empty one drops everything.
      await app.sql(`select pg_notify('svc_test_kept', 'b')`);
      await vi.waitFor(() => expect(cache.size).toBe(1), { timeout: 15_000, interval: 50 });
      await app.sql(`select pg_notify('svc_test_kept', '')`);
      await vi.waitFor(() => expect(cache.size).toBe(0), { timeout: 15_000, interval: 50 });
    } finally {
      await cache.stop();
    }
  });

  it('hands every request the same frozen row, so none can change what the next one reads', async () => {
    const services = app.stack.services;
    const row = await services.workflows.hookBySlug(hook.slug);
    expect(row).toBe(await services.workflows.hookBySlug(hook.slug));
    expect(Object.isFrozen(row) && Object.isFrozen(row!.nodes) && Object.isFrozen(row!.nodes[0]) && Object.isFrozen(row!.trigger)).toBe(true);
  });
});

describe('schedule trigger', () => {
  it('creates a Temporal Schedule on activate that starts runs, pauses it on deactivate and deletes it on purge', async () => {
    const created = await app.admin.post(W, {
      title: 'Every second',
      trigger: { type: 'schedule', config: { cron: '@every 1s', overlap: 'skip' } },
      nodes: [{ id: 'tick', type: 'transform', config: { value: '{{ trigger.scheduled }}' } }],
    });
    expect(created.status).toBe(201);
    const id = created.body.data.id;
    const handle = app.stack.services.temporal.client.schedule.getHandle(app.stack.services.temporal.scheduleId(id));
    await expect(handle.describe()).rejects.toBeInstanceOf(ScheduleNotFoundError);

    await app.admin.post(`${W}/${id}/activate`);
    const described = await handle.describe();
    expect(described.state.paused).toBe(false);
    expect(described.policies.overlap).toBe('SKIP');
    const run = await eventually(
      async () => {
        const list = (await app.admin.get(`/api/workflow/v1/executions?workflow_id=${id}&status=success`)).body.data;
        return list.total > 0 ? list.items[0] : undefined;
      },
      60_000,
      'a scheduled run',
    );
    expect(run.trigger).toBe('schedule');

    await app.admin.post(`${W}/${id}/deactivate`);
    expect((await handle.describe()).state.paused).toBe(true);
    await app.admin.post(`${W}/${id}/activate`);
    expect((await handle.describe()).state.paused).toBe(false);
    await app.admin.delete(`${W}/${id}`);
    expect((await handle.describe()).state.paused).toBe(true);
    // A tick just before the pause may have started a run whose record is written by its first
    // step: the purge is refused (409) while any run is going, so it is asked again until none is.
    const purged = await eventually(
      async () => {
        const answer = await app.admin.delete(`${W}/${id}?force=true`);
        return answer.status === 409 ? undefined : answer;
      },
      30_000,
      'runs to settle and the purge',
    );
    expect(purged.status, purged.text).toBe(200);
    await expect(handle.describe()).rejects.toBeInstanceOf(ScheduleNotFoundError);
  });

  it('updates the schedule when an active workflow changes its cron line', async () => {
    const created = await app.admin.post(W, {
      title: 'Hourly',
      status: 'active',
      trigger: { type: 'schedule', config: { cron: '0 * * * *' } },
      nodes: [{ id: 'tick', type: 'transform', config: { value: 1 } }],
    });
    expect(created.body.data.status).toBe('active');
    const handle = app.stack.services.temporal.client.schedule.getHandle(app.stack.services.temporal.scheduleId(created.body.data.id));
    expect((await handle.describe()).spec.calendars?.[0]?.hour).toBeDefined();
    await app.admin.patch(`${W}/${created.body.data.id}`, { trigger: { type: 'schedule', config: { cron: '30 2 * * *', overlap: 'buffer_one' } } });
    const after = await handle.describe();
    expect(after.policies.overlap).toBe('BUFFER_ONE');
    expect(after.spec.calendars?.[0]).toMatchObject({ minute: [{ start: 30, end: 30, step: 1 }] });
  });
});
