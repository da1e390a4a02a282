import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateMasterKey } from '../src/platform/crypto.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { TARGET_HOST, startHttpTarget, type HttpTarget } from './helpers/http-target.js';
import { freePort } from './helpers/ports.js';

let app: TestApp;
let target: HttpTarget;
const logs: string[] = [];
const C = '/api/workflow/v1/connections';
const SECRET = 'sk-live-abcdefghijklmnop-a1b2';

beforeAll(async () => {
  app = await startTestApp({ worker: true, logs, env: { SVC_PROBE_TIMEOUT_MS: '3000' } });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/slow')) return { delayMs: 6000 };
    const ok = req.headers.authorization === `Bearer ${SECRET}` || req.headers['x-api-key'] === SECRET;
    return ok ? { body: { data: [] } } : { status: 401, body: { error: 'bad key' } };
  });
});
afterAll(async () => {
  await app?.close();
  await target?.close();
});

const create = (body: Record<string, unknown>) =>
  app.admin.post(C, { type: 'http_bearer', label: 'API', cred: SECRET, extra: { base_url: target.url }, ...body });

describe('storage', () => {
  it('encrypts the credential at rest and only ever shows a masked preview', async () => {
    const res = await create({ label: 'CRM' });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({ type: 'http_bearer', label: 'CRM', cred_preview: 'sk-…a1b2', extra: { base_url: target.url } });
    expect(res.text).not.toContain(SECRET);
    const [row] = await app.sql<{ cred_encrypted: string; key_id: string }>('select cred_encrypted, key_id from connections where id = $1', [res.body.data.id]);
    expect(row!.cred_encrypted).not.toContain(SECRET);
    expect(row!.cred_encrypted.split(':')).toHaveLength(4);
    expect(row!.key_id).toMatch(/^[0-9a-f]{8}$/);
    const list = await app.admin.get(C);
    expect(list.text).not.toContain(SECRET);
    expect(list.body.data.items.some((c: { id: number }) => c.id === res.body.data.id)).toBe(true);
  });

  it('uses a fresh IV for every value', async () => {
    const a = (await create({})).body.data.id;
    const b = (await create({})).body.data.id;
    const rows = await app.sql<{ cred_encrypted: string }>('select cred_encrypted from connections where id = any($1)', [[a, b]]);
    expect(rows[0]!.cred_encrypted).not.toBe(rows[1]!.cred_encrypted);
  });

  it('relabels and rotates the credential with PATCH', async () => {
    const { id } = (await create({ cred: 'old-credential-0000' })).body.data;
    const res = await app.admin.patch(`${C}/${id}`, { label: 'Rotated', cred: SECRET });
    expect(res.body.data).toMatchObject({ label: 'Rotated', cred_preview: 'sk-…a1b2' });
    expect((await app.admin.post(`${C}/${id}/test`)).status).toBe(200);
  });

  it('validates type, base_url and fields', async () => {
    const res = await app.admin.post(C, { type: 'ftp', label: '', cred: '', extra: { base_url: 'not a url' } });
    expect(res.status).toBe(400);
    expect(res.body.data.errors.map((e: { field: string }) => e.field).sort()).toEqual(['cred', 'extra.base_url', 'label', 'type']);
    expect((await app.admin.post(C, { type: 'http_bearer', label: 'x', cred: 'y', extra: { base_url: 'file:///etc/passwd' } })).status).toBe(400);
  });

  it('is managed by administrators; an editor lists only the connections shared with them', async () => {
    const editor = await app.createUser('editor');
    const { id } = (await create({})).body.data;
    expect((await editor.client.get(C)).body.data.items).toEqual([]);
    expect((await app.admin.patch(`${C}/${id}`, { shared_with: [editor.id] })).status).toBe(200);
    const listed = (await editor.client.get(C)).body.data.items;
    expect(listed.map((c: { id: number }) => c.id)).toEqual([id]);
    expect(listed[0]).toMatchObject({ shared_with: [editor.id], owner: { login: 'admin' } });
    expect(JSON.stringify(listed)).not.toContain('cred_encrypted');
    expect((await editor.client.post(C, { type: 'http_bearer', label: 'x', cred: 'y', extra: { base_url: target.url } })).status).toBe(403);
    expect((await editor.client.post(`${C}/${id}/test`)).status).toBe(403);
    expect((await editor.client.delete(`${C}/${id}`)).status).toBe(403);
    const unknown = await app.admin.patch(`${C}/${id}`, { shared_with: [999999] });
    expect(unknown.status).toBe(400);
    expect(unknown.body.data.errors).toEqual([expect.objectContaining({ field: 'shared_with.0' })]);
  });
});

describe('key rotation', () => {
  it('still decrypts credentials sealed under a previous key and seals new ones under the current key', async () => {
    const { id } = (await create({})).body.data;
    const oldKey = app.config.SVC_ENCRYPTION_KEY!;
    const rotated = await startTestApp({
      databaseUrl: app.databaseUrl,
      env: { SVC_ENCRYPTION_KEY: generateMasterKey(), SVC_PREVIOUS_ENCRYPTION_KEYS: oldKey },
    });
    try {
      expect((await rotated.admin.post(`${C}/${id}/test`)).status).toBe(200);
      const [before] = await app.sql<{ key_id: string }>('select key_id from connections where id = $1', [id]);
      await rotated.admin.patch(`${C}/${id}`, { cred: SECRET });
      const [after] = await app.sql<{ key_id: string }>('select key_id from connections where id = $1', [id]);
      expect(after!.key_id).not.toBe(before!.key_id);
      expect((await rotated.admin.post(`${C}/${id}/test`)).status).toBe(200);
    } finally {
      await rotated.close();
    }
    // Without the old key the old value cannot be read: the key really changed.
    const stale = (await create({})).body.data.id;
    const withoutOld = await startTestApp({ databaseUrl: app.databaseUrl, env: { SVC_ENCRYPTION_KEY: generateMasterKey() } });
    try {
      const unreadable = await withoutOld.admin.post(`${C}/${stale}/test`);
      expect(unreadable.status).toBe(500);
      expect(unreadable.body.error).toBe('credential_unreadable');
    } finally {
      await withoutOld.close();
    }
  });
});

describe('probe', () => {
  it('passes with 200 and probe_status when the target accepts the credential', async () => {
    const { id } = (await create({})).body.data;
    const res = await app.admin.post(`${C}/${id}/test`);
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ probe_status: 200 });
    const header = (await create({ type: 'http_header', extra: { base_url: target.url, header_name: 'X-API-Key' } })).body.data.id;
    expect((await app.admin.post(`${C}/${header}/test`)).status).toBe(200);
  });

  it('fails with 422 probe_failed and data.error for refusal, 401, timeout and DNS failure', async () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ cred: 'wrong' }, /401/],
      [{ extra: { base_url: `http://${TARGET_HOST}:${await freePort(TARGET_HOST)}` } }, /refused/],
      [{ extra: { base_url: `${target.url}/slow` } }, /within 3000 ms/],
      [{ extra: { base_url: 'http://no-such-host.invalid' } }, /could not be resolved/],
    ];
    for (const [body, message] of cases) {
      const { id } = (await create(body)).body.data;
      const res = await app.admin.post(`${C}/${id}/test`);
      expect(res.status).toBe(422);
      expect(res.body).toMatchObject({ status: 'fail', error: 'probe_failed' });
      expect(res.body.data.error).toMatch(message);
    }
    expect((await app.admin.post(`${C}/424242/test`)).status).toBe(404);
  });
});

describe('use in a run', () => {
  // A run's first short call reads its connection with the claim of the run's record; a later
  // node reads it on its own. Both must send the credential as it is now, and refuse alike.
  const runOf = async (nodes: Record<string, unknown>[], edges: { from: string; to: string }[] = []) => {
    const workflow = (await app.admin.post('/api/workflow/v1/workflows', { title: 'Calls', trigger: { type: 'manual' }, nodes, edges })).body.data;
    const run = await app.admin.post(`/api/workflow/v1/workflows/${workflow.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
    return (await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
  };

  it('sends the credential from the first node and from a later one, and refuses one it cannot decrypt', async () => {
    const { id } = (await create({})).body.data;
    const call = (name: string) => ({ id: name, type: 'http_request', connection_id: id, config: { method: 'GET', path: '/' } });
    const both = await runOf([call('first'), call('second')], [{ from: 'first', to: 'second' }]);
    expect(both.status).toBe('success');
    // The target answers 401 to any other credential.
    expect(both.timeline.map((e: { node_id: string; status: string; output: { status: number } }) => [e.node_id, e.status, e.output.status])).toEqual([
      ['first', 'success', 200],
      ['second', 'success', 200],
    ]);

    const sealed = await create({});
    await app.sql(`update connections set cred_encrypted = 'ffffffff:AAAA:AAAA:AAAA', key_id = 'ffffffff' where id = $1`, [sealed.body.data.id]);
    const unreadable = await runOf([{ ...call('first'), connection_id: sealed.body.data.id }]);
    expect(unreadable.status).toBe('failed');
    expect(unreadable.timeline[0]).toMatchObject({ node_id: 'first', status: 'failed', error: { code: 'credential_unreadable' } });
    expect(JSON.stringify(unreadable)).not.toContain(SECRET);
  });
});

describe('deletion', () => {
  it('is refused while an active workflow uses it; forced, those workflows fail with connection_missing', async () => {
    const { id } = (await create({})).body.data;
    const workflow = (
      await app.admin.post('/api/workflow/v1/workflows', {
        title: 'Uses the connection',
        trigger: { type: 'manual' },
        nodes: [{ id: 'call', type: 'http_request', connection_id: id, config: { method: 'GET', path: '/' } }],
      })
    ).body.data;
    // Inactive users do not block deletion; active ones do.
    await app.admin.post(`/api/workflow/v1/workflows/${workflow.id}/activate`);
    const refused = await app.admin.delete(`${C}/${id}`);
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({
      error: 'connection_in_use',
      data: { workflows: [{ id: workflow.id, slug: workflow.slug, title: 'Uses the connection' }] },
    });

    const forced = await app.admin.delete(`${C}/${id}?force=true`);
    expect(forced.status).toBe(200);
    expect(forced.body.data.workflows).toHaveLength(1);
    expect((await app.admin.get(C)).body.data.items.some((c: { id: number }) => c.id === id)).toBe(false);

    const run = await app.admin.post(`/api/workflow/v1/workflows/${workflow.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
    expect(run.body.data.status).toBe('failed');
    const execution = (await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
    expect(execution.error).toMatchObject({ code: 'connection_missing', node_id: 'call' });
    expect(execution.timeline[0]).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'connection_missing' } });
  });

  it('deletes an unused connection and 404s an unknown one', async () => {
    const { id } = (await create({})).body.data;
    expect((await app.admin.delete(`${C}/${id}`)).status).toBe(200);
    expect((await app.admin.delete(`${C}/${id}`)).status).toBe(404);
  });
});

describe('Temporal history', () => {
  it('holds neither the credential nor node data in clear: payloads are encrypted by the codec', async () => {
    const { id } = (await create({})).body.data;
    const marker = 'visible-only-to-the-service-7f3a';
    const workflow = (
      await app.admin.post('/api/workflow/v1/workflows', {
        title: 'Secret-bearing',
        trigger: { type: 'manual' },
        nodes: [
          { id: 'call', type: 'http_request', connection_id: id, config: { method: 'GET', path: '/' } },
          { id: 'mark', type: 'transform', config: { value: marker } },
        ],
        edges: [{ from: 'call', to: 'mark' }],
      })
    ).body.data;
    const run = await app.admin.post(`/api/workflow/v1/workflows/${workflow.id}/run?wait=true&timeout_ms=90000`, { payload: { note: marker } });
    expect(run.body.data.status).toBe('success');
    const { client, namespace } = app.stack.services.temporal;
    const history = await client.workflowService.getWorkflowExecutionHistory({
      namespace,
      execution: { workflowId: app.stack.services.temporal.executionWorkflowId(run.body.data.execution_id) },
    });
    const raw = JSON.stringify(history.history);
    const bytes = Buffer.concat(
      (history.history?.events ?? []).flatMap((e) =>
        [
          e.workflowExecutionStartedEventAttributes?.input,
          e.activityTaskScheduledEventAttributes?.input,
          e.activityTaskCompletedEventAttributes?.result,
          e.workflowExecutionCompletedEventAttributes?.result,
        ]
          .flatMap((p) => p?.payloads ?? [])
          .map((p) => Buffer.from(p.data ?? new Uint8Array())),
      ),
    );
    expect(bytes.length).toBeGreaterThan(0);
    for (const text of [SECRET, marker]) {
      expect(bytes.includes(Buffer.from(text))).toBe(false);
      expect(raw).not.toContain(text);
    }
    // The codec endpoint decodes them for an operator.
    const payload = history.history!.events!.find((e) => e.workflowExecutionStartedEventAttributes)!.workflowExecutionStartedEventAttributes!.input!
      .payloads![0]!;
    const decoded = await app.admin.post('/api/temporal-codec/decode', {
      payloads: [
        {
          metadata: Object.fromEntries(Object.entries(payload.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
          data: Buffer.from(payload.data!).toString('base64'),
        },
      ],
    });
    expect(decoded.status).toBe(200);
    expect(Buffer.from(decoded.body.payloads[0].data, 'base64').toString()).toContain(marker);
    const subscriber = await app.createUser('subscriber');
    expect((await subscriber.client.post('/api/temporal-codec/decode', { payloads: [] })).status).toBe(403);
    // Nor does any log line of the service (API and worker) hold the credential.
    expect(logs.length).toBeGreaterThan(0);
    expect(logs.join('\n')).not.toContain(SECRET);
    expect((await app.anonymous.post('/api/temporal-codec/decode', { payloads: [] })).status).toBe(401);
  });
});
