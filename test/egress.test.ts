import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { TARGET_HOST, eventually } from './helpers/http-target.js';
import { issueLicense, portal, site } from './helpers/licenses.js';
import { freePort } from './helpers/ports.js';

/**
 * What a workflow, a connection probe, a model provider and a licence webhook may reach. The
 * service's neighbours on 127.0.0.1 (here a stand-in for the codec listener, which decrypts any
 * payload for whoever asks) must stay out of reach of every outbound call made for a user,
 * directly, through a name, or through a redirect; credentials go to their own origin only.
 */
let app: TestApp;
let inside: Recorder;
/** What the loopback target had received when the current test began: tests assert on what came after. */
let seenBefore = 0;
beforeEach(() => {
  seenBefore = inside?.seen.length ?? 0;
});
let front: Recorder;
let echo: Recorder;
const W = '/api/workflow/v1';

interface Recorder {
  url: string;
  port: number;
  seen: { url: string; method: string; headers: IncomingHttpHeaders }[];
  close(): Promise<void>;
}

/**
 * A loopback server recording what it receives. `/to?url=...&status=307` answers with a redirect
 * there; with `bounce`, any `/bounce/<path>` is redirected (307) to `<bounce>/<path>`.
 */
async function recorder(host: string, body: unknown = { ok: true }, bounce?: string): Promise<Recorder> {
  const seen: Recorder['seen'] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push({ url: req.url ?? '/', method: req.method ?? 'GET', headers: req.headers });
      const query = new URLSearchParams((req.url ?? '').split('?')[1] ?? '');
      const bounced = bounce && req.url?.startsWith('/bounce/') ? `${bounce}/${req.url.slice('/bounce/'.length)}` : null;
      const to = query.get('url') ?? bounced;
      if (to) return res.writeHead(Number(query.get('status') ?? 307), { location: to }).end();
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  await new Promise<void>((ok) => server.listen(0, host, ok));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://${host}:${port}`,
    port,
    seen,
    close: () => new Promise<void>((ok) => (server.closeAllConnections(), server.close(() => ok()))),
  };
}

beforeAll(async () => {
  inside = await recorder('127.0.0.1', { decoded: 'another user’s secret payload' });
  echo = await recorder(TARGET_HOST);
  front = await recorder(TARGET_HOST, { ok: true }, echo.url);
  app = await startTestApp({ worker: true, env: { SVC_LICENSE_WEBHOOK_RETRY_MS: '100', SVC_LICENSE_WEBHOOK_MAX_ATTEMPTS: '3' } });
});
afterAll(async () => {
  await app?.close();
  await Promise.all([inside?.close(), front?.close(), echo?.close()]);
});

async function connection(body: Record<string, unknown>): Promise<number> {
  const res = await app.admin.post(`${W}/connections`, { label: 'c', cred: 'the-credential-0042', ...body });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function runNode(node: Record<string, unknown>) {
  const created = await app.admin.post(`${W}/workflows`, { title: `egress ${Math.random()}`, trigger: { type: 'manual' }, nodes: [{ id: 'call', ...node }] });
  expect(created.status, created.text).toBe(201);
  const run = await app.admin.post(`${W}/workflows/${created.body.data.id}/run?wait=true&timeout_ms=60000`, { payload: {} });
  expect(run.status, run.text).toBe(200);
  return (await app.admin.get(`${W}/executions/${run.body.data.execution_id}`)).body.data;
}

describe('workflow nodes', () => {
  it('an http_request node cannot reach loopback directly, by name or through a redirect', async () => {
    const direct = await connection({ type: 'http_bearer', extra: { base_url: inside.url } });
    const byName = await connection({ type: 'http_bearer', extra: { base_url: `http://localhost:${inside.port}` } });
    const redirecting = await connection({ type: 'http_bearer', extra: { base_url: front.url } });
    for (const [connectionId, path] of [
      [direct, '/decode'],
      [byName, '/decode'],
      [redirecting, `/to?url=${encodeURIComponent(`${inside.url}/decode`)}`],
      [redirecting, `/to?status=302&url=${encodeURIComponent(`http://[::ffff:127.0.0.1]:${inside.port}/decode`)}`],
    ] as const) {
      const execution = await runNode({ type: 'http_request', connection_id: connectionId, config: { method: 'POST', path, body: { payloads: [] } } });
      expect(execution.status, path).toBe('failed');
      // Its own code, not retried: the same destination is refused every time.
      expect(execution.timeline[0]).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'egress_denied' } });
    }
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });

  it('a credential goes to its connection’s origin only, never along a redirect to another', async () => {
    for (const type of ['http_header', 'http_bearer', 'http_basic'] as const) {
      const id = await connection({ type, extra: { base_url: front.url, ...(type === 'http_header' ? { header_name: 'X-Api-Key' } : {}) } });
      echo.seen.length = 0;
      const execution = await runNode({
        type: 'http_request',
        connection_id: id,
        config: { method: 'GET', path: `/to?url=${encodeURIComponent(`${echo.url}/elsewhere`)}`, headers: { authorization: 'Bearer set-by-the-node' } },
      });
      expect(execution.status, type).toBe('success');
      expect(front.seen.at(-1)!.headers, type).toMatchObject(type === 'http_header' ? { 'x-api-key': 'the-credential-0042' } : {});
      const away = echo.seen.at(-1)!;
      expect(JSON.stringify(away.headers), type).not.toContain('the-credential-0042');
      expect(away.headers.authorization, type).toBeUndefined();
      expect(away.headers['x-api-key'], type).toBeUndefined();
    }
  });

  it('a model provider credential (anthropic) is not re-sent on a redirect to another origin', async () => {
    const id = await connection({ type: 'anthropic', extra: { base_url: `${front.url}/bounce` } });
    echo.seen.length = 0;
    // llm_prompt posts to {base_url}/v1/messages; the front answers 307 to the echo server.
    const created = await app.admin.post(`${W}/workflows`, {
      title: 'llm redirect',
      trigger: { type: 'manual' },
      nodes: [{ id: 'ask', type: 'llm_prompt', connection_id: id, config: { model: 'claude-x', prompt: 'hi' }, retry: { max_attempts: 1 } }],
    });
    expect(created.status, created.text).toBe(201);
    await app.admin.post(`${W}/workflows/${created.body.data.id}/run?wait=true&timeout_ms=60000`, { payload: {} });
    const away = echo.seen.find((r) => r.url === '/v1/messages');
    expect(away, 'the redirect was followed to the echo server').toBeDefined();
    expect(away!.headers['x-api-key']).toBeUndefined();
    expect(JSON.stringify(away!.headers)).not.toContain('the-credential-0042');
  });
});

describe('connection probes', () => {
  it('refuse loopback with 422 egress_denied before connecting, open port or not: no port scanner', async () => {
    const open = await connection({ type: 'http_bearer', extra: { base_url: inside.url } });
    const closed = await connection({ type: 'http_bearer', extra: { base_url: `http://127.0.0.1:${await freePort()}` } });
    const answers = [];
    for (const id of [open, closed]) {
      const res = await app.admin.post(`${W}/connections/${id}/test`);
      expect(res.status).toBe(422);
      expect(res.body.error).toBe('egress_denied');
      answers.push(res.body.data.error.replace(/:\d+/, ':PORT'));
    }
    expect(answers[0]).toBe(answers[1]);
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });
});

describe('model providers and licence webhooks', () => {
  it('an agent session whose provider is on loopback ends its turn with egress_denied', async () => {
    const provider = await connection({ type: 'openai', extra: { base_url: `${inside.url}/v1` } });
    const session = await app.admin.post('/api/agent/v1/sessions', { provider_id: provider, model_id: 'm' });
    expect(session.status, session.text).toBe(201);
    const turn = await app.admin.post(`/api/agent/v1/sessions/${session.body.data.session_id}/messages`, { content: 'hi', stream: false });
    expect(turn.status).toBe(502);
    expect(turn.body.error).toBe('egress_denied');
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });

  it('a vendor webhook on loopback fails its delivery at once, and sends nothing', async () => {
    const hook = await app.admin.post('/api/management/v1/licence-webhooks', { url: `${inside.url}/hook`, events: ['license.activated'] });
    expect(hook.status, hook.text).toBe(201);
    const license = await issueLicense(app);
    expect((await portal(app.anonymous, license.token, 'activate', site('https://egress.example'))).status).toBe(200);
    const delivery = await eventually(async () => {
      const items = (await app.admin.get(`/api/management/v1/licence-webhooks/${hook.body.data.id}/deliveries`)).body.data.items;
      return items[0]?.status === 'failed' ? items[0] : undefined;
    });
    expect(delivery.attempts).toHaveLength(1);
    expect(delivery.last_error).toMatch(/private or reserved/);
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });
});

describe('SVC_EGRESS_ALLOW', () => {
  it('names what may be reached anyway, down to the port', async () => {
    const allowing = await startTestApp({ worker: true, env: { SVC_EGRESS_ALLOW: `${TARGET_HOST},127.0.0.1:${inside.port}` } });
    try {
      const create = async (base: string) =>
        (await allowing.admin.post(`${W}/connections`, { type: 'http_bearer', label: 'x', cred: 'c', extra: { base_url: base } })).body.data.id as number;
      expect((await allowing.admin.post(`${W}/connections/${await create(inside.url)}/test`)).status).toBe(200);
      const other = await allowing.admin.post(`${W}/connections/${await create(`http://127.0.0.1:${await freePort()}`)}/test`);
      expect(other.body.error).toBe('egress_denied');
    } finally {
      await allowing.close();
    }
    expect(inside.seen.map((r) => r.method)).toEqual(['GET']);
  });
});
