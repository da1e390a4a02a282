import { createHmac } from 'node:crypto';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { runCli } from './helpers/cli.js';
import { eventually, startHttpTarget, type HttpTarget, type SeenRequest } from './helpers/http-target.js';
import { issueLicense, portal, site } from './helpers/licenses.js';

const root = '/api/management/v1/licence-webhooks';
let app: TestApp;
let receiver: HttpTarget;
/** Answers per path, in order; the last one repeats. 200 when a path has none. */
const script = new Map<string, number[]>();

beforeAll(async () => {
  receiver = await startHttpTarget((req) => {
    const path = req.url.split('?')[0]!;
    const statuses = script.get(path);
    const status = statuses && statuses.length > 1 ? statuses.shift()! : (statuses?.[0] ?? 200);
    return { status, body: { received: true } };
  });
  app = await startTestApp({
    worker: true,
    env: { SVC_LICENSE_RATE_LIMIT: '100000', SVC_LICENSE_WEBHOOK_RETRY_MS: '200', SVC_LICENSE_WEBHOOK_MAX_ATTEMPTS: '3' },
  });
});
afterAll(async () => {
  await app?.close();
  await receiver?.close();
});

const seen = (path: string) => receiver.requests.filter((r) => r.url === path);

async function createWebhook(path: string, body: Record<string, unknown> = {}) {
  const res = await app.admin.post(root, { url: `${receiver.url}${path}`, ...body });
  expect(res.status, res.text).toBe(201);
  return res.body.data as { id: number; secret: string; events: string[] };
}

async function deliveries(id: number, query = '') {
  const res = await app.admin.get(`${root}/${id}/deliveries${query}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
}

/** Checks `Svc-Signature: t=<unix>,v1=<hex>` as a receiver would: HMAC-SHA256 of "t.body" under the secret. */
function signatureValid(request: SeenRequest, secret: string): boolean {
  const header = String(request.headers['svc-signature'] ?? '');
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header);
  if (!match) return false;
  const expected = createHmac('sha256', secret).update(`${match[1]}.${request.body}`).digest('hex');
  return expected === match[2] && Math.abs(Date.now() / 1000 - Number(match[1])) < 300;
}

describe('licence webhooks: management', () => {
  it('creates with a secret shown once, lists with pagination, reads, changes and deletes', async () => {
    const created = await createWebhook('/crud', { events: ['license.activated', 'license.activated', 'license.deactivated'], description: 'CRM sync' });
    expect(created).toMatchObject({
      events: ['license.activated', 'license.deactivated'],
      description: 'CRM sync',
      active: true,
      secret: expect.stringMatching(/^whsec_\S{32}$/),
    });
    expect(created.secret.endsWith((created as unknown as { secret_hint: string }).secret_hint)).toBe(true);
    const all = await createWebhook('/crud-all');
    expect(all.events).toEqual(['license.activated', 'license.deactivated', 'license.limit_reached', 'license.status_changed']);

    // Sealed at rest, never shown again.
    const [stored] = await app.sql<{ secret_sealed: string }>('select secret_sealed from license_webhooks where id = $1', [created.id]);
    expect(stored!.secret_sealed).not.toContain(created.secret);
    const read = await app.admin.get(`${root}/${created.id}`);
    expect(read.status).toBe(200);
    expect(read.text).not.toContain(created.secret);
    expect(read.body.data).not.toHaveProperty('secret');

    const page = await app.admin.get(`${root}?per_page=1&page=2`);
    expect(page.status).toBe(200);
    expect(page.body.data).toMatchObject({ page: 2, per_page: 1, total: expect.any(Number) });
    expect(page.body.data.items).toHaveLength(1);
    expect(page.text).not.toContain('whsec_');

    const patched = await app.admin.patch(`${root}/${created.id}`, { active: false, description: null, events: ['license.status_changed'] });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ active: false, description: null, events: ['license.status_changed'], url: `${receiver.url}/crud` });

    expect((await app.admin.delete(`${root}/${created.id}`)).body.data).toEqual({ id: created.id, deleted: true });
    expect((await app.admin.get(`${root}/${created.id}`)).status).toBe(404);
    expect((await app.admin.delete(`${root}/${created.id}`)).status).toBe(404);
    expect((await app.admin.get(`${root}/${created.id}/deliveries`)).status).toBe(404);
  });

  it('refuses bad input with the documented 400 envelope', async () => {
    for (const body of [
      { url: 'ftp://example.com/hook' },
      { url: 'not a url' },
      { url: `${receiver.url}/x`, events: [] },
      { url: `${receiver.url}/x`, events: ['license.exploded'] },
      { url: `${receiver.url}/x`, secret: 'mine' },
      {},
    ]) {
      const res = await app.admin.post(root, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body).toMatchObject({ status: 'fail', error: 'validation_failed', data: { errors: expect.any(Array) } });
    }
    expect((await app.admin.patch(`${root}/1`, {})).status).toBe(400);
    expect((await app.admin.get(`${root}?per_page=101`)).status).toBe(400);
    expect((await app.admin.get(`${root}/1/deliveries?status=lost`)).status).toBe(400);
  });

  it('needs svc_manage_licenses', async () => {
    const editor = await app.createUser('editor');
    expect((await editor.client.get(root)).status).toBe(403);
    expect((await app.anonymous.post(root, { url: `${receiver.url}/x` })).status).toBe(401);
  });
});

describe('licence webhooks: delivery', () => {
  it('delivers license.activated signed, retrying after a failure, and records both attempts', async () => {
    script.set('/flaky', [500, 200]);
    const hook = await createWebhook('/flaky', { events: ['license.activated'] });
    const license = await issueLicense(app);
    const s = site('https://webhook-shop.example');
    const activated = await portal(app.anonymous, license.token, 'activate', { ...s, plugin_version: '3.1.0' });
    expect(activated.status).toBe(200);

    await eventually(async () => seen('/flaky').length >= 2, 30_000, 'the second attempt');
    const [first, second] = seen('/flaky');
    for (const request of [first!, second!]) {
      expect(request.method).toBe('POST');
      expect(request.headers['content-type']).toBe('application/json');
      expect(request.headers['svc-event']).toBe('license.activated');
      expect(signatureValid(request, hook.secret)).toBe(true);
      expect(signatureValid(request, 'whsec_another-secret')).toBe(false);
    }
    // Every attempt carries the same event; only the signature's time may differ.
    expect(second!.body).toBe(first!.body);
    expect(second!.headers['svc-delivery']).toBe(first!.headers['svc-delivery']);
    const event = JSON.parse(first!.body);
    expect(event).toEqual({
      id: expect.stringMatching(/^evt_/),
      type: 'license.activated',
      created_at: expect.any(String),
      data: {
        license: expect.objectContaining({ id: license.id, reference_id: license.reference_id, status: 'active', product_slug: 'seo-suite' }),
        activation: expect.objectContaining({
          activation_id: activated.body.data.activation_id,
          site_url: s.site_url,
          domain: 'webhook-shop.example',
          plugin_version: '3.1.0',
          status: 'active',
        }),
      },
    });
    expect(first!.headers['svc-event-id']).toBe(event.id);

    const record = await eventually(
      async () => {
        const page = await deliveries(hook.id);
        return page.items[0]?.status === 'delivered' ? page : undefined;
      },
      30_000,
      'the delivery to be recorded as delivered',
    );
    expect(record.total).toBe(1);
    expect(record.items[0]).toMatchObject({
      id: first!.headers['svc-delivery'],
      event: 'license.activated',
      event_id: event.id,
      status: 'delivered',
      attempt_count: 2,
      last_status: 200,
      last_error: null,
      finished_at: expect.any(String),
      payload: event,
      attempts: [
        { attempt: 1, response_status: 500, error: 'answered 500', duration_ms: expect.any(Number), started_at: expect.any(String) },
        { attempt: 2, response_status: 200, error: null, duration_ms: expect.any(Number), started_at: expect.any(String) },
      ],
    });
    // Starting the delivery again (the sweep, a retried dispatch) is a no-op: its workflow id is the delivery's.
    await app.stack.services.licenseWebhooks.sweep(0);
    const handle = app.stack.services.temporal.client.workflow.getHandle(app.stack.services.licenseWebhooks.workflowId(record.items[0].id));
    expect(await handle.result()).toEqual({ deliveryId: record.items[0].id, status: 'delivered', attempts: 2 });
    const starts = vi.spyOn(app.stack.services.temporal.client.workflow, 'start');
    try {
      app.stack.services.licenseWebhooks.dispatch([record.items[0].id]);
      // Temporal refuses the second start of the delivery's workflow: nothing can send it again.
      await eventually(async () => starts.mock.results.length > 0, 30_000, 'the dispatch to start the delivery');
      await expect(starts.mock.results[0]!.value).rejects.toBeInstanceOf(WorkflowExecutionAlreadyStartedError);
    } finally {
      starts.mockRestore();
    }
    expect(seen('/flaky')).toHaveLength(2);
  });

  it('sends each subscribed event: deactivated, limit_reached, status_changed; nothing for a reactivation or to inactive webhooks', async () => {
    const everything = await createWebhook('/events');
    const statusOnly = await createWebhook('/status-only', { events: ['license.status_changed'] });
    const off = await createWebhook('/off');
    await app.admin.patch(`${root}/${off.id}`, { active: false });
    const license = await issueLicense(app, { domain_limit: 1 });
    const a = site('https://first-site.example');
    expect((await portal(app.anonymous, license.token, 'activate', a)).status).toBe(200);
    expect((await portal(app.anonymous, license.token, 'activate', a)).body.data.reactivated).toBe(true);
    expect((await portal(app.anonymous, license.token, 'activate', site('https://second-site.example'))).status).toBe(409);
    expect((await portal(app.anonymous, license.token, 'deactivate', { site_fingerprint: a.site_fingerprint })).status).toBe(200);
    expect((await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked' })).status).toBe(200);
    // A change that leaves the status as it was is no status change.
    expect((await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked', domain_limit: 2 })).status).toBe(200);

    const types = () => seen('/events').map((r) => JSON.parse(r.body).type);
    // Each event is stored as a delivery in the licence change's own transaction: once every
    // delivery of the webhook is delivered, nothing more will arrive.
    const stored = await eventually(
      async () => {
        const page = await deliveries(everything.id);
        return page.total > 0 && page.items.every((d: { status: string }) => d.status === 'delivered') ? page : undefined;
      },
      30_000,
      'every delivery to /events',
    );
    expect(stored.total).toBe(4);
    expect(types().sort()).toEqual(['license.activated', 'license.deactivated', 'license.limit_reached', 'license.status_changed']);
    const byType = Object.fromEntries(seen('/events').map((r) => [JSON.parse(r.body).type, JSON.parse(r.body)]));
    expect(byType['license.limit_reached'].data).toMatchObject({
      site_limit: 1,
      site: { domain: 'second-site.example', site_url: 'https://second-site.example' },
      license: { id: license.id },
    });
    expect(byType['license.deactivated'].data).toMatchObject({ slot_freed: true, activation: { status: 'deactivated', domain: 'first-site.example' } });
    expect(byType['license.status_changed'].data).toMatchObject({ previous_status: 'active', license: { id: license.id, status: 'revoked' } });
    for (const request of seen('/events')) expect(signatureValid(request, everything.secret)).toBe(true);

    await eventually(async () => seen('/status-only').length >= 1, 30_000, 'the status event');
    expect(seen('/status-only').map((r) => JSON.parse(r.body).type)).toEqual(['license.status_changed']);
    expect(signatureValid(seen('/status-only')[0]!, statusOnly.secret)).toBe(true);
    expect(seen('/off')).toHaveLength(0);
    expect((await deliveries(off.id)).total).toBe(0);
    // The event id is the same in every webhook's delivery of it.
    expect(JSON.parse(seen('/status-only')[0]!.body).id).toBe(byType['license.status_changed'].id);
  });

  it('records a delivery as failed when the attempts run out', async () => {
    script.set('/down', [503]);
    const hook = await createWebhook('/down', { events: ['license.status_changed'] });
    const license = await issueLicense(app);
    await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'pending' });
    const record = await eventually(
      async () => {
        const page = await deliveries(hook.id, '?status=failed');
        return page.total === 1 ? page : undefined;
      },
      30_000,
      'the delivery to fail',
    );
    expect(seen('/down')).toHaveLength(3);
    expect(record.items[0]).toMatchObject({ status: 'failed', attempt_count: 3, last_status: 503, last_error: 'answered 503' });
    expect(record.items[0].attempts.map((a: { response_status: number }) => a.response_status)).toEqual([503, 503, 503]);
    expect((await deliveries(hook.id, '?status=delivered')).total).toBe(0);
    // A page past the end is empty and still carries the total.
    expect(await deliveries(hook.id, '?status=failed&page=9')).toMatchObject({ total: 1, items: [] });
    const listed = await app.admin.get(`${root}?per_page=1`);
    const past = await app.admin.get(`${root}?page=999`);
    expect(past.body.data).toMatchObject({ total: listed.body.data.total, items: [] });
    expect(listed.body.data.total).toBeGreaterThanOrEqual(1);
  });

  it('delivers events of changes made by the CLI, which only writes them: the sweep starts them', async () => {
    const hook = await createWebhook('/from-cli', { events: ['license.status_changed'] });
    const license = await issueLicense(app);
    const revoked = await runCli(['license', 'revoke', license.reference_id, '--json'], { DATABASE_URL: app.databaseUrl, LOG_LEVEL: 'warn' });
    expect(revoked.code, revoked.stderr).toBe(0);
    const [pending] = await app.sql<{ status: string; dispatched_at: Date | null }>(
      'select status, dispatched_at from license_webhook_deliveries where webhook_id = $1',
      [hook.id],
    );
    expect(pending).toEqual({ status: 'pending', dispatched_at: null });
    // The worker sweeps every 30 s for deliveries older than 10 s; here it is asked at once.
    expect(await app.stack.services.licenseWebhooks.sweep(0)).toBeGreaterThanOrEqual(1);
    await eventually(async () => seen('/from-cli').length === 1, 30_000, 'the swept delivery');
    expect(JSON.parse(seen('/from-cli')[0]!.body).data).toMatchObject({ previous_status: 'active', license: { status: 'revoked' } });
  });
});
