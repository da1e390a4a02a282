import type { Payload } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentSessionWorkflowId } from '../workflows/defs.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { closedHistory } from './helpers/history.js';
import { providerConnection, startFakeAnthropic, type FakeProvider } from './helpers/fake-providers.js';
import { TARGET_HOST, eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';
import type { HttpClient, HttpResponse } from './helpers/http.js';
import { issueLicense, portal, site } from './helpers/licenses.js';
import { freePort } from './helpers/ports.js';

/**
 * Security review, as tests: after a session that uses every kind of credential the service
 * holds, none of them appears in an API response (other than the one that hands it out), a log
 * line, or the Temporal history of the runs, decoded or not; session cookies and nonces carry the
 * flags and expiry they claim; every body parser has a size limit.
 */
let app: TestApp;
let target: HttpTarget;
let provider: FakeProvider;
const logs: string[] = [];
const responses: string[] = [];
const W = '/api/workflow/v1';

const CONNECTION_SECRET = 'conn-secret-5e1f0a9b7c3d';
const PROVIDER_KEY = 'sk-ant-provider-key-77aa21';

beforeAll(async () => {
  app = await startTestApp({ worker: true, logs });
  target = await startHttpTarget((req) => {
    if (req.headers.authorization !== `Bearer ${CONNECTION_SECRET}`) return { status: 401, body: { error: 'bad key' } };
    if (req.url.startsWith('/fail')) return { status: 500, body: { error: 'upstream broke' } };
    return { body: { ok: true } };
  });
  provider = await startFakeAnthropic();
});
afterAll(async () => {
  await app?.close();
  await target?.close();
  await provider?.close();
});

/** Every response the test sees is kept, to be searched for secrets at the end. */
async function seen(res: Promise<HttpResponse>): Promise<HttpResponse> {
  const r = await res;
  responses.push(`${r.status} ${JSON.stringify(Object.fromEntries(r.headers))} ${r.text}`);
  return r;
}

/** Every payload in a Temporal history event, wherever the event type keeps it. */
function payloadsOf(value: unknown, out: Payload[] = []): Payload[] {
  if (!value || typeof value !== 'object') return out;
  const v = value as Record<string, unknown>;
  if (v.data instanceof Uint8Array && 'metadata' in v) out.push(v as Payload);
  else for (const child of Object.values(v)) payloadsOf(child, out);
  return out;
}

describe('secrets', () => {
  it('appear in no response, log line, error message or Temporal history, encoded or decoded', async () => {
    const editor = await app.createUser('editor');
    const admin = app.admin;

    // Connections: an HTTP credential and a model provider key.
    const conn = (await seen(admin.post(`${W}/connections`, { type: 'http_bearer', label: 'API', cred: CONNECTION_SECRET, extra: { base_url: target.url } })))
      .body.data.id;
    const refused = (
      await seen(
        admin.post(`${W}/connections`, {
          type: 'http_bearer',
          label: 'Down',
          cred: CONNECTION_SECRET,
          extra: { base_url: `http://${TARGET_HOST}:${await freePort(TARGET_HOST)}` },
        }),
      )
    ).body.data.id;
    const llm = await providerConnection(admin, 'anthropic', provider.url, PROVIDER_KEY);
    await seen(admin.patch(`${W}/connections/${llm}`, { shared_with: [editor.id] }));
    expect((await seen(admin.post(`${W}/connections/${conn}/test`))).status).toBe(200);
    expect((await seen(admin.post(`${W}/connections/${refused}/test`))).status).toBe(422);
    await seen(admin.patch(`${W}/connections/${conn}`, { label: 'API (rotated)', cred: CONNECTION_SECRET }));
    await seen(admin.get(`${W}/connections`));
    await seen(admin.get(`${W}/connections/${conn}`));

    // Runs that use them: success, an upstream failure, a refused connection, a model call.
    const workflow = (
      await seen(
        admin.post(`${W}/workflows`, {
          title: 'Uses credentials',
          trigger: { type: 'manual' },
          nodes: [
            { id: 'call', type: 'http_request', connection_id: conn, config: { method: 'POST', path: '/ok', body: { echo: '{{ trigger }}' } } },
            { id: 'ask', type: 'llm_prompt', connection_id: llm, config: { model: 'claude-test', prompt: 'Summarise {{ trigger.topic }}' } },
          ],
          edges: [{ from: 'call', to: 'ask' }],
        }),
      )
    ).body.data;
    const failing = (
      await seen(
        admin.post(`${W}/workflows`, {
          title: 'Fails with credentials',
          trigger: { type: 'manual' },
          nodes: [
            { id: 'upstream', type: 'http_request', connection_id: conn, config: { method: 'GET', path: '/fail' }, retry: { max_attempts: 1 } },
            { id: 'down', type: 'http_request', connection_id: refused, config: { method: 'GET', path: '/' }, retry: { max_attempts: 1 } },
          ],
          edges: [],
        }),
      )
    ).body.data;
    const ok = await seen(admin.post(`${W}/workflows/${workflow.id}/run?wait=true&timeout_ms=90000`, { payload: { topic: 'tides' } }));
    expect(ok.body.data.status, ok.text).toBe('success');
    const bad = await seen(admin.post(`${W}/workflows/${failing.id}/run?wait=true&timeout_ms=90000`, { payload: {} }));
    expect(bad.body.data.status, bad.text).toBe('failed');
    const executions = [ok.body.data.execution_id, bad.body.data.execution_id] as number[];
    for (const id of executions) await seen(admin.get(`${W}/executions/${id}`));
    const failedView = responses.at(-1)!;
    expect(failedView).toMatch(/upstream|500/);
    expect(failedView).toMatch(/refused/i);
    // The credentials did reach their targets.
    expect(target.requests.some((r) => r.headers.authorization === `Bearer ${CONNECTION_SECRET}`)).toBe(true);
    expect(provider.requests.some((r) => r.headers['x-api-key'] === PROVIDER_KEY)).toBe(true);

    // An agent session on the provider key.
    const session = (await seen(editor.client.post('/api/agent/v1/sessions', { provider_id: llm, model_id: 'claude-test' }))).body.data.session_id;
    const turn = await seen(editor.client.post(`/api/agent/v1/sessions/${session}/messages`, { content: 'hello', stream: false }));
    expect(turn.status, turn.text).toBe(200);

    // Passwords: a failed and a good browser login, app passwords over Basic.
    await seen(app.anonymous.post('/api/auth/v1/login', { login: editor.login, password: `${editor.password}-wrong` }));
    const login = await seen(app.anonymous.post('/api/auth/v1/login', { login: editor.login, password: editor.password }));
    expect(login.status).toBe(200);
    const created = await seen(editor.client.post('/api/auth/v1/app-passwords', { name: 'laptop' }));
    const issuedAppPassword = created.body.data.password as string;
    expect(issuedAppPassword).toBeTruthy();
    await seen(app.client({ login: editor.login, password: issuedAppPassword }).get('/api/auth/v1/me'));
    await seen(app.client({ login: editor.login, password: `${issuedAppPassword}x` }).get('/api/auth/v1/me'));

    // A licence key: handed out once, then only ever sent by the plugin in the path.
    const licence = await issueLicense(app);
    const place = site('https://shop.example.com');
    await seen(portal(app.anonymous, licence.token, 'activate', place));
    await seen(portal(app.anonymous, licence.token, 'verify', place));
    await seen(portal(app.anonymous, `${licence.token}x`, 'verify', place));
    await seen(admin.get(`/api/management/v1/licenses/${licence.id}`));
    await seen(admin.get('/api/management/v1/licenses'));

    // The Temporal history of every run of this app: raw bytes, and every payload decoded.
    const { client, decode, executionWorkflowId } = app.stack.services.temporal;
    const histories: string[] = [];
    const runs = executions.map(executionWorkflowId);
    for (const workflowId of [...runs, agentSessionWorkflowId(session)]) {
      // The runs have ended (read once Temporal has closed them); the session stays open.
      const handle = client.workflow.getHandle(workflowId);
      const history = runs.includes(workflowId) ? await closedHistory(handle) : await handle.fetchHistory();
      const decoded = await Promise.all(payloadsOf(history).map((p) => decode(p)));
      histories.push(JSON.stringify(history), JSON.stringify(decoded));
    }
    expect(histories.length).toBeGreaterThanOrEqual(6); // two runs and the session, each raw and decoded
    expect(histories.join('\n')).toContain('tides'); // the decoded side really is readable

    await eventually(async () => logs.some((l) => l.includes('/messages')), 10_000, 'the last request to be logged');
    const secrets: Record<string, string> = {
      'connection credential': CONNECTION_SECRET,
      'provider key': PROVIDER_KEY,
      'user password': editor.password,
      'app password': editor.appPassword,
      'issued app password': issuedAppPassword,
      'licence key': licence.token,
      'encryption key': app.config.SVC_ENCRYPTION_KEY!,
    };
    const sessionCookie = /svc_session=([^;]+)/.exec(login.headers.get('set-cookie') ?? '')?.[1];
    expect(sessionCookie).toBeTruthy();
    const handedOut = [created, login].map((r) => responses.findIndex((t) => t.endsWith(r.text)));
    const places: Record<string, string> = {
      responses: responses.filter((_, i) => !handedOut.includes(i)).join('\n'),
      logs: logs.join('\n'),
      'Temporal history': histories.join('\n'),
    };
    for (const [where, text] of Object.entries(places)) {
      for (const [what, secret] of Object.entries(secrets)) expect(text.includes(secret), `${what} in ${where}`).toBe(false);
      expect(text.includes(decodeURIComponent(sessionCookie!)), `session cookie in ${where}`).toBe(false);
    }
    expect(logs.length).toBeGreaterThan(0);
  }, 240_000);
});

describe('browser sessions', () => {
  let short: TestApp;
  /** How far the sessions' clock runs ahead of the real one: the test moves time on instead of waiting for it. */
  let ahead = 0;
  beforeAll(async () => {
    // Nonces live a minute (their expiry is in whole seconds, so 59 to 60 s), sessions two; cookies
    // are Secure. The margins below leave seconds of real time for a loaded machine.
    short = await startTestApp({
      clock: () => Date.now() + ahead,
      env: { SVC_COOKIE_SECURE: 'true', SVC_NONCE_TTL_HOURS: String(60 / 3600), SVC_SESSION_TTL_HOURS: String(120 / 3600) },
    });
  });
  afterAll(async () => short?.close());

  async function login(app: TestApp) {
    const user = await app.createUser('editor');
    const res = await app.anonymous.post('/api/auth/v1/login', { login: user.login, password: user.password });
    expect(res.status, res.text).toBe(200);
    const setCookie = res.headers.get('set-cookie') ?? '';
    return { setCookie, cookie: setCookie.split(';')[0]!, nonce: res.body.data.nonce as string };
  }
  const me = (client: HttpClient) => client.get('/api/auth/v1/me').then((r) => r.status);

  it('sets HttpOnly, SameSite=Lax, Path=/ and an expiry; Secure when SVC_COOKIE_SECURE is on', async () => {
    const plain = (await login(app)).setCookie.toLowerCase();
    expect(plain).toMatch(/httponly/);
    expect(plain).toMatch(/samesite=lax/);
    expect(plain).toMatch(/path=\//);
    expect(plain).toMatch(/expires=/);
    expect(plain).not.toMatch(/;\s*secure/);
    expect((await login(short)).setCookie.toLowerCase()).toMatch(/;\s*secure/);
  });

  it('refuses a nonce once it has expired, though its signature is good, and the cookie once the session has', async () => {
    ahead = 0;
    const { cookie, nonce } = await login(short);
    expect(await me(short.client({ cookie, nonce }))).toBe(200);
    ahead = 50_000;
    expect(await me(short.client({ cookie, nonce }))).toBe(200);
    ahead = 61_000;
    expect(await me(short.client({ cookie, nonce }))).toBe(401);
    const fresh = await short.client({ cookie }).get('/api/auth/v1/nonce');
    expect(fresh.status).toBe(200);
    expect(await me(short.client({ cookie, nonce: fresh.body.data.nonce }))).toBe(200);
    ahead = 110_000;
    expect((await short.client({ cookie }).get('/api/auth/v1/nonce')).status).toBe(200);
    ahead = 121_000;
    expect((await short.client({ cookie }).get('/api/auth/v1/nonce')).status).toBe(401);
    expect(await me(short.client({ cookie, nonce: fresh.body.data.nonce }))).toBe(401);
  });
});

describe('request size limits', () => {
  it('every operation with a body refuses one over SVC_BODY_LIMIT, in JSON and form encoding, with 413', async () => {
    const doc = (await app.anonymous.get('/api/openapi.json')).body as { paths: Record<string, Record<string, { requestBody?: unknown }>> };
    const limit = app.config.SVC_BODY_LIMIT;
    const json = JSON.stringify({ filler: 'x'.repeat(limit) });
    const form = `filler=${'x'.repeat(limit)}`;
    let checked = 0;
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        if (!op.requestBody) continue;
        const url = path.replace(/\{[^}]+\}/g, '1');
        for (const [raw, contentType] of [
          [json, 'application/json'],
          [form, 'application/x-www-form-urlencoded'],
        ] as const) {
          const res = await app.admin.request(method.toUpperCase(), url, { raw, contentType });
          expect(res.status, `${method} ${path} ${contentType}`).toBe(413);
          expect(res.body.error).toBe('payload_too_large');
        }
        // Bodies no parser reads are refused too, not buffered.
        const other = await app.admin.request(method.toUpperCase(), url, { raw: 'x'.repeat(limit + 1), contentType: 'text/plain' });
        expect([400, 413, 415], `${method} ${path} text/plain`).toContain(other.status);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(20);
  }, 120_000);
});
