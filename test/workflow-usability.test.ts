import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { startHttpTarget, type HttpTarget } from './helpers/http-target.js';

/** What a new user trips on: references, templates, failed runs' answers, retried nodes' times, webhook URLs, trying an expression. */
let app: TestApp;
let target: HttpTarget;
let connectionId: number;
let flaky = 0;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  target = await startHttpTarget((req) => {
    if (req.url.startsWith('/flaky')) return ++flaky <= 3 ? { status: 503, body: { error: 'busy' } } : { body: { ok: true } };
    return undefined;
  });
  connectionId = (
    await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 't', cred: 'tok-usability', extra: { base_url: target.url } })
  ).body.data.id;
});
afterAll(async () => {
  await app?.close();
  await target?.close();
});

async function create(def: Record<string, unknown>) {
  const res = await app.admin.post(W, { title: `usability ${Math.random()}`, trigger: { type: 'manual' }, edges: [], ...def });
  expect(res.status, res.text).toBe(201);
  return res.body.data as { id: number; slug: string; webhook: { url: string; secret: string } | null };
}

describe('references to nodes', () => {
  it('refuses, at save, a node that does not exist and one that is not upstream, naming the node and where', async () => {
    const res = await app.admin.post(W, {
      title: 'refs',
      trigger: { type: 'manual' },
      nodes: [
        { id: 'a', type: 'transform', config: { value: { x: '{{ nodes.nope.z }}' } } },
        { id: 'b', type: 'transform', config: { value: '{{ nodes.c }}' } },
        { id: 'c', type: 'transform', config: { value: '{{ nodes.a.x }}' } },
      ],
      edges: [
        { from: 'a', to: 'b' },
        { from: 'a', to: 'c' },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body.data.errors).toEqual([
      { field: 'nodes.0.config.value.x', message: 'refers to node "nope" (nodes.nope), which does not exist in this workflow' },
      {
        field: 'nodes.1.config.value',
        message: 'node "b" refers to node "c", which is not upstream of it (no path of edges leads from c to b): it has no output when b runs',
      },
    ]);
  });
});

describe('templates', () => {
  it('a }} that closes a JSONata object inside {{ }} does not end the expression', async () => {
    const wf = await create({ nodes: [{ id: 'shape', type: 'transform', config: { value: '{{ {"order": {"n": trigger.n}} }}' } }] });
    const res = await app.admin.post(`${W}/${wf.id}/run?wait=true`, { payload: { n: 3 } });
    expect(res.body.data).toMatchObject({ status: 'success', output: { order: { n: 3 } } });
  });
});

describe('the answer of a failed run', () => {
  it('run?wait=true carries the error', async () => {
    const wf = await create({ nodes: [{ id: 'check', type: 'fail', config: { message: 'The card was declined', code: 'card_declined' } }] });
    const res = await app.admin.post(`${W}/${wf.id}/run?wait=true`, { payload: {} });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      status: 'failed',
      output: null,
      error: { code: 'card_declined', message: 'The card was declined', node_id: 'check' },
    });
    const ok = await create({ nodes: [{ id: 'fine', type: 'transform', config: { value: 1 } }] });
    expect((await app.admin.post(`${W}/${ok.id}/run?wait=true`, { payload: {} })).body.data).toEqual({
      execution_id: expect.any(Number),
      status: 'success',
      output: 1,
      error: null,
      redacted: false,
    });
  });

  it('a webhook answering with the last node answers a failed run with 422 run_failed and the fail node’s message', async () => {
    const wf = await create({
      trigger: { type: 'webhook', config: { respond: 'last_node' } },
      status: 'active',
      nodes: [{ id: 'check', type: 'fail', config: { message: 'Missing email: {{ $string(trigger.email) }}', code: 'invalid_form' } }],
    });
    const res = await app.anonymous.request('POST', `/api/workflow/v1/hooks/${wf.slug}`, {
      body: { name: 'Ada' },
      headers: { 'X-Webhook-Secret': wf.webhook!.secret },
    });
    expect(res.status).toBe(422);
    expect(res.body).toMatchObject({
      status: 'fail',
      error: 'run_failed',
      message: 'Missing email: ',
      data: { status: 'failed', error: { code: 'invalid_form', message: 'Missing email: ', node_id: 'check' } },
    });
    expect(res.body.data.execution_id).toEqual(expect.any(Number));
  });

  it('the executions list shows each run’s error', async () => {
    const wf = await create({ nodes: [{ id: 'stop', type: 'fail', config: { message: 'listed' } }] });
    await app.admin.post(`${W}/${wf.id}/run?wait=true`, { payload: {} });
    const list = await app.admin.get(`${E}?workflow_id=${wf.id}`);
    expect(list.body.data.items[0]).toMatchObject({ status: 'failed', error: { code: 'node_failed', message: 'listed', node_id: 'stop' } });
  });
});

describe('a retried node’s time', () => {
  it('runs from the first attempt’s start to the last one’s end; the last attempt’s own time is kept beside it', async () => {
    const wf = await create({
      nodes: [
        {
          id: 'call',
          type: 'http_request',
          connection_id: connectionId,
          config: { method: 'GET', path: '/flaky' },
          retry: { max_attempts: 4, initial_interval_ms: 200, backoff_coefficient: 2 },
        },
      ],
    });
    const res = await app.admin.post(`${W}/${wf.id}/run?wait=true&timeout_ms=60000`, { payload: {} });
    expect(res.body.data.status).toBe('success');
    const call = (await app.admin.get(`${E}/${res.body.data.execution_id}`)).body.data.timeline[0];
    expect(call.attempts).toBe(4);
    // Temporal waits 200 + 400 + 800 ms between the four attempts: the node took at least that.
    expect(call.duration_ms).toBeGreaterThanOrEqual(1400);
    expect(call.last_attempt_ms).toBeLessThan(call.duration_ms);
    expect(new Date(call.finished_at).getTime() - new Date(call.started_at).getTime()).toBe(call.duration_ms);
  });
});

describe("a webhook workflow's URL", () => {
  it('is on the origin the request came to when no public URL is set, and on SVC_PUBLIC_URL when it is', async () => {
    const wf = await create({ trigger: { type: 'webhook' }, nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }] });
    expect(wf.webhook!.url).toBe(`${app.url}/api/workflow/v1/hooks/${wf.slug}`);
    const behindProxy = await startTestApp({
      databaseUrl: app.databaseUrl,
      env: {
        SVC_PUBLIC_URL: 'https://automations.example.com/',
        SVC_ENCRYPTION_KEY: app.config.SVC_ENCRYPTION_KEY!,
        SVC_INSTANCE_ID: app.config.SVC_INSTANCE_ID,
      },
    });
    try {
      const seen = await behindProxy.admin.get(`${W}/${wf.id}`);
      expect(seen.body.data.webhook.url).toBe(`https://automations.example.com/api/workflow/v1/hooks/${wf.slug}`);
    } finally {
      await behindProxy.close();
    }
  });
});

describe('trying an expression', () => {
  const evaluate = (body: unknown) => app.admin.post('/api/workflow/v1/expressions/evaluate', body);

  it('evaluates a bare expression or a template against a context', async () => {
    expect(
      (await evaluate({ expression: '$sum(nodes.cart.items.price)', context: { nodes: { cart: { items: [{ price: 2 }, { price: 3 }] } } } })).body.data,
    ).toEqual({
      value: 5,
      type: 'number',
      template: false,
    });
    expect((await evaluate({ expression: 'Hello, {{ $uppercase(trigger.name) }}', context: { trigger: { name: 'Ada' } } })).body.data).toEqual({
      value: 'Hello, ADA',
      type: 'string',
      template: true,
    });
    expect((await evaluate({ expression: '{{ {"a": {"b": 1}} }}' })).body.data).toMatchObject({ value: { a: { b: 1 } }, type: 'object' });
    expect((await evaluate({ expression: 'trigger.missing' })).body.data).toEqual({ value: null, type: 'undefined', template: false });
  });

  it('answers an error with where it is', async () => {
    const syntax = await evaluate({ expression: 'Total: {{ 1 + }}' });
    expect(syntax.status).toBe(422);
    expect(syntax.body).toMatchObject({ error: 'expression_error', data: { position: 13, expression: 'Total: {{ 1 + }}' } });
    const failing = await evaluate({ expression: '$number("abc")' });
    expect(failing.status).toBe(422);
    expect(failing.body.error).toBe('expression_error');
    const unclosed = await evaluate({ expression: 'x {{ {"a": 1 }}' });
    expect(unclosed.body).toMatchObject({ error: 'expression_error', data: { position: 2 } });
  });

  it('holds to the limits of a run', async () => {
    const res = await evaluate({ expression: '$count([1..1000000])' });
    expect(res.status).toBe(422);
    expect(res.body.error).toBe('expression_limit');
  });
});
