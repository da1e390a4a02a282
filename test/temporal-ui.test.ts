import { execFile } from 'node:child_process';
import { request } from 'node:http';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';
import { createLogger } from '../src/platform/logger.js';
import { provisionTemporalCli } from '../src/platform/temporal-server.js';
import { ADMIN_APP_PASSWORD, ADMIN_PASSWORD, startTestApp, type TestApp } from './helpers/app.js';
import { launchChromium } from './helpers/browser.js';
import { startHttpTarget } from './helpers/http-target.js';
import { freePorts } from './helpers/ports.js';

// The embedded default as `npm start` runs it (its own Temporal dev server with the Web UI and
// the loopback codec listener), against this file's database; and a real browser on the UI.
let app: TestApp;
let browser: Browser;
let dataDir: string;
let uiPort: number;
const contexts: BrowserContext[] = [];

const marker = `greeting-${Math.random().toString(36).slice(2, 10)}`;
const result = marker.toUpperCase();
let uiUrl: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'svc-ui-'));
  const [ui, temporalPort] = await freePorts(2);
  uiPort = ui!;
  [app, browser] = await Promise.all([
    startTestApp({
      worker: true,
      embedded: true,
      env: {
        TEMPORAL_ADDRESS: '',
        SVC_DATA_DIR: dataDir,
        TEMPORAL_PORT: String(temporalPort),
        TEMPORAL_UI_PORT: String(uiPort),
        SVC_CODEC_PORT: '0',
        ...(process.env.TEMPORAL_CLI ? { TEMPORAL_CLI: process.env.TEMPORAL_CLI } : {}),
      },
    }),
    launchChromium(),
  ]);
  const workflow = await app.admin.post('/api/workflow/v1/workflows', {
    title: 'Greets in capitals',
    trigger: { type: 'manual' },
    nodes: [{ id: 'shout', type: 'transform', config: { value: { answer: '{{ $uppercase(trigger.greeting) }}' } } }],
    edges: [],
  });
  expect(workflow.status).toBe(201);
  const run = await app.admin.post(`/api/workflow/v1/workflows/${workflow.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: { greeting: marker } });
  expect(run.body.data).toMatchObject({ status: 'success', output: { answer: result } });
  const execution = await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`);
  uiUrl = execution.body.data.temporal.ui_url;
}, 900_000);

afterAll(async () => {
  for (const context of contexts) await context.close().catch(() => undefined);
  await browser?.close();
  await app?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

async function newPage(
  setup?: (context: BrowserContext) => Promise<unknown>,
  httpCredentials?: { username: string; password: string; origin: string },
): Promise<{ page: Page; codecCalls: string[] }> {
  // httpCredentials answer an HTTP authentication prompt as the operator would type them.
  const context = await browser.newContext(httpCredentials ? { httpCredentials } : {});
  contexts.push(context);
  await setup?.(context);
  const page = await context.newPage();
  const codecCalls: string[] = [];
  page.on('requestfinished', (req) => {
    if (/\/(decode|encode)(\?|$)/.test(req.url())) codecCalls.push(req.url());
  });
  return { page, codecCalls };
}

const pageText = (page: Page) => page.locator('body').innerText();

/**
 * Waits until the UI shows the run's input and result panels and either the codec's error or the
 * run's result decoded. The input panel is decoded on its own and can come first (its graph names
 * `answer` too), so the result's own value is what says the result panel was decoded.
 */
async function openRun(page: Page, url = uiUrl): Promise<string> {
  await page.goto(url);
  await expect.poll(() => pageText(page), { timeout: 60_000 }).toMatch(/Input[\s\S]*Result/);
  const settled = (text: string) => text.includes('could not connect') || text.includes(result);
  await expect.poll(async () => settled(await pageText(page)), { timeout: 60_000 }).toBe(true);
  return pageText(page);
}

describe('Temporal Web UI in the embedded default', () => {
  it("shows a local operator the run's input and result decoded, with no further step", async () => {
    expect(uiUrl.startsWith(`http://localhost:${uiPort}/namespaces/default/workflows/`)).toBe(true);
    // What Temporal stores is ciphertext: the value reaches the page only through the codec.
    const { client, namespace, executionWorkflowPrefix } = app.stack.services.temporal;
    const workflowId = decodeURIComponent(uiUrl.split('/workflows/')[1]!.split('/')[0]!);
    expect(workflowId.startsWith(executionWorkflowPrefix)).toBe(true);
    const history = await client.workflowService.getWorkflowExecutionHistory({ namespace, execution: { workflowId } });
    const stored = Buffer.concat(
      (history.history?.events ?? []).flatMap((e) => (e.workflowExecutionStartedEventAttributes?.input?.payloads ?? []).map((p) => Buffer.from(p.data ?? []))),
    );
    expect(stored.length).toBeGreaterThan(0);
    expect(stored.includes(Buffer.from(marker))).toBe(false);

    const { page, codecCalls } = await newPage();
    const text = await openRun(page);
    expect(text).not.toContain('Codec Server could not connect');
    expect(text).toContain(marker);
    expect(text).toContain(result);
    expect(codecCalls.some((url) => url.startsWith(`${app.stack.urls.codec}/decode`))).toBe(true);
  });

  it('opens the latest run from a ui_url given before the run id was known', async () => {
    const { page } = await newPage();
    const workflowPage = uiUrl.replace(/\/[^/]+\/history$/, '');
    expect(workflowPage).toMatch(/\/workflows\/[^/]+$/);
    expect(await openRun(page, workflowPage)).toContain(result);
  });

  it("shows a failed activity's message decoded, though Temporal stores it encrypted", async () => {
    const card = `4000${Math.floor(Math.random() * 1e12)}`;
    const target = await startHttpTarget(() => ({ status: 400, body: { declined: true } }));
    try {
      const conn = await app.admin.post('/api/workflow/v1/connections', {
        type: 'http_bearer',
        label: 'cards',
        cred: 'tok-cards',
        extra: { base_url: target.url },
      });
      const workflow = await app.admin.post('/api/workflow/v1/workflows', {
        title: 'Charges a card',
        trigger: { type: 'manual' },
        // A call longer than SVC_LOCAL_CALL_MAX_MS runs as a regular activity: its failure is an event of its own.
        nodes: [
          {
            id: 'charge',
            type: 'http_request',
            connection_id: conn.body.data.id,
            timeout_ms: 60_000,
            config: { method: 'GET', path: '/cards/{{ trigger.card }}' },
          },
        ],
        edges: [],
      });
      const run = await app.admin.post(`/api/workflow/v1/workflows/${workflow.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: { card } });
      expect(run.body.data.status, run.text).toBe('failed');
      const execution = (await app.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
      const { client, namespace } = app.stack.services.temporal;
      const history = await client.workflowService.getWorkflowExecutionHistory({ namespace, execution: { workflowId: execution.temporal.workflow_id } });
      expect(JSON.stringify(history)).not.toContain(card);
      const { page } = await newPage();
      await page.goto(execution.temporal.ui_url);
      await expect.poll(() => pageText(page), { timeout: 60_000 }).toMatch(/ActivityTaskFailed|Activity Task Failed/i);
      await page
        .getByText(/ActivityTaskFailed|Activity Task Failed/i)
        .first()
        .click();
      await expect.poll(() => pageText(page), { timeout: 60_000 }).toContain(`HTTP 400 from GET /cards/${card}`);
    } finally {
      await target.close();
    }
  });

  it('shows ciphertext and the codec error when the codec cannot be reached', async () => {
    const { page } = await newPage((context) => context.route(`${app.stack.urls.codec}/**`, (route) => route.abort('connectionrefused')));
    const text = await openRun(page);
    expect(text).toContain('Codec Server could not connect');
    expect(text).not.toContain(marker);
    expect(text).not.toContain(result);
  });
});

/** A raw request, so the Host header can be anything a browser could send. */
function call(
  path: string,
  headers: Record<string, string>,
  method = 'POST',
  body = '',
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const url = new URL(path, app.stack.urls.codec);
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.once('error', reject);
    req.end(body);
  });
}

/** The run's input as `temporal workflow show` prints it (base64 of the payload's bytes). */
async function inputShownByCli(extra: string[]): Promise<string> {
  const cli = await provisionTemporalCli(createLogger('silent'), process.env.TEMPORAL_CLI);
  const workflowId = decodeURIComponent(uiUrl.split('/workflows/')[1]!.split('/')[0]!);
  const args = ['workflow', 'show', '--workflow-id', workflowId, '--address', app.stack.urls.temporal, '--output', 'json', ...extra];
  const stdout = await new Promise<string>((resolve, reject) =>
    execFile(cli, args, { timeout: 60_000 }, (err, out, stderr) => (err ? reject(new Error(stderr || err.message)) : resolve(out))),
  );
  const [started] = JSON.parse(stdout).events;
  return Buffer.from(started.workflowExecutionStartedEventAttributes.input.payloads[0].data, 'base64').toString();
}

describe('the loopback codec listener', () => {
  it('listens on 127.0.0.1 only', () => {
    const port = Number(new URL(app.stack.urls.codec!).port);
    const listening = (file: string) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .slice(1)
        .map((line) => line.trim().split(/\s+/))
        .filter((f) => f[3] === '0A' && parseInt(f[1]!.split(':')[1]!, 16) === port)
        .map((f) => f[1]!.split(':')[0]);
    expect(listening('/proc/net/tcp')).toEqual(['0100007F']);
    expect(listening('/proc/net/tcp6')).toEqual([]);
  });

  it("lets only the UI's pages read answers, takes JSON only, and refuses requests addressed to other names", async () => {
    const host = new URL(app.stack.urls.codec!).host;
    const origin = `http://localhost:${uiPort}`;
    const json = { 'Content-Type': 'application/json', Host: host };
    const body = JSON.stringify({ payloads: [] });

    const preflight = { Host: host, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace' };
    const allowed = await call('/decode', { ...preflight, Origin: origin }, 'OPTIONS');
    expect(allowed.status).toBe(204);
    expect(allowed.headers['access-control-allow-origin']).toBe(origin);
    const foreign = await call('/decode', { ...preflight, Origin: 'http://attacker.test' }, 'OPTIONS');
    expect(foreign.status).toBe(403);
    expect(foreign.headers['access-control-allow-origin']).toBeUndefined();

    expect((await call('/decode', { ...json, Origin: origin }, 'POST', body)).status).toBe(200);
    expect((await call('/decode', { ...json, Origin: 'http://attacker.test' }, 'POST', body)).status).toBe(403);
    // A host name rebound to 127.0.0.1 makes the page same-origin with the listener: refused.
    expect((await call('/decode', { ...json, Host: `attacker.test:${new URL(app.stack.urls.codec!).port}` }, 'POST', body)).status).toBe(403);
    // Simple requests (another site's form post) skip the preflight: refused before any work.
    expect((await call('/decode', { Host: host, 'Content-Type': 'text/plain' }, 'POST', body)).status).toBe(415);
    expect((await call('/decode', { Host: host }, 'GET')).status).toBe(405);
    expect((await call('/other', json, 'POST', body)).status).toBe(404);
    // Ciphertext that is not this service's is the caller's error.
    const bogus = { payloads: [{ metadata: { encoding: Buffer.from('binary/encrypted').toString('base64') }, data: 'AAAA' }] };
    const refused = await call('/decode', json, 'POST', JSON.stringify(bogus));
    expect(refused.status).toBe(400);
    expect(JSON.parse(refused.body)).toMatchObject({ status: 'fail', error: 'invalid_request' });
  });

  it('decodes for the temporal CLI on this machine too (--codec-endpoint)', async () => {
    expect(await inputShownByCli(['--codec-endpoint', app.stack.urls.codec!])).toContain(marker);
    expect(await inputShownByCli([])).not.toContain(marker);
  });

  it('cannot be configured onto another address', () => {
    for (const value of ['0.0.0.0:8234', '[::]:8234', 'all', '70000']) {
      expect(() => loadConfig({ SVC_CODEC_PORT: value }), value).toThrow(ConfigError);
    }
    expect(loadConfig({ SVC_CODEC_PORT: 'off' }).SVC_CODEC_PORT).toBe('off');
    expect(loadConfig({}).SVC_CODEC_PORT).toBe(8234);
  });
});

describe("Temporal Web UI through the API's authenticated codec endpoint (the cluster set-up)", () => {
  // The UI and the API on one site (localhost, as in docker-compose.yml), the UI set to call
  // /api/temporal-codec with credentials: what TEMPORAL_CODEC_ENDPOINT and
  // TEMPORAL_CODEC_INCLUDE_CREDENTIALS set for a whole cluster, set here as this browser's own.
  const operatorBrowser = (password?: string, username = 'admin') =>
    newPage(
      async (context) => {
        const endpoint = `${apiOrigin()}/api/temporal-codec`;
        await context.addInitScript((codec) => {
          // Runs in the page; the UI keeps its browser codec settings in localStorage as JSON.
          const storage = (globalThis as unknown as { localStorage: { setItem(key: string, value: string): void } }).localStorage;
          storage.setItem('overrideRemoteCodecConfiguration', 'true');
          storage.setItem('endpoint', JSON.stringify(codec));
          storage.setItem('includeCredentials', 'true');
        }, endpoint);
      },
      password === undefined ? undefined : { username, password, origin: apiOrigin() },
    );
  const apiOrigin = () => `http://localhost:${new URL(app.url).port}`;

  it("decodes once the operator answers the browser's login prompt with an application password", async () => {
    const { page, codecCalls } = await operatorBrowser(ADMIN_APP_PASSWORD);
    const text = await openRun(page);
    expect(text).not.toContain('Codec Server could not connect');
    expect(text).toContain(marker);
    expect(text).toContain(result);
    expect(codecCalls.some((url) => url.startsWith(`${apiOrigin()}/api/temporal-codec/decode`))).toBe(true);
  });

  it('decodes without a prompt in a browser signed in to the API (its session cookie)', async () => {
    const { page } = await operatorBrowser();
    await page.goto(`${apiOrigin()}/healthz`);
    const login = await page.evaluate(
      async (password) =>
        (
          await fetch('/api/auth/v1/login', {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ login: 'admin', password }),
          })
        ).status,
      ADMIN_PASSWORD,
    );
    expect(login).toBe(200);
    const text = await openRun(page);
    expect(text).not.toContain('Codec Server could not connect');
    expect(text).toContain(result);
  });

  it('decodes for the temporal CLI with an application password (--codec-auth)', async () => {
    const basic = `Basic ${Buffer.from(`admin:${ADMIN_APP_PASSWORD}`).toString('base64')}`;
    const endpoint = `${app.url}/api/temporal-codec`;
    expect(await inputShownByCli(['--codec-endpoint', endpoint, '--codec-auth', basic])).toContain(marker);
  });

  it('shows ciphertext to an operator whose credentials the API refuses', async () => {
    // Not the admin account: the browser retries the refused call, and each try counts against the
    // sign-in limit of the login it names, which the other tests sign in with.
    const { page } = await operatorBrowser('not-an-application-password', 'someone-else');
    const text = await openRun(page);
    expect(text).toContain('Codec Server could not connect');
    expect(text).not.toContain(marker);
    expect(text).not.toContain(result);
  });
});
