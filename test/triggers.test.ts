import { ScheduleNotFoundError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
