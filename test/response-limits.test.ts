import { createServer, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { providerConnection } from './helpers/fake-providers.js';
import { TARGET_HOST } from './helpers/http-target.js';

/**
 * Answers read for a user stop at SVC_EGRESS_RESPONSE_LIMIT (the default, 10 MiB), whoever reads
 * them: a node's target streaming 300 MB, a model answering 300 MB as JSON or as an event stream,
 * a probe. The process's memory is sampled during each call: reading the whole answer first (as
 * the service once did) grows it by more than the answer itself.
 */

const W = '/api/workflow/v1';
const A = '/api/agent/v1';
const HUGE = 300 * 1024 * 1024;
const LIMIT = 10 * 1024 * 1024;
/** Peak growth of the process's resident memory allowed during one call: far below the answer's size. */
const GROWTH = 128 * 1024 * 1024;

let app: TestApp;
let huge: { url: string; sent: () => number; close: () => Promise<void> };
/** Whether the fake model streams its answer. */
let streamed = false;

/** Writes `total` bytes in 64 KiB pieces, waiting for the socket to drain; resolves how many went out before the client left. */
async function pour(res: ServerResponse, total: number, piece: (i: number) => string | Buffer): Promise<number> {
  let sent = 0;
  for (let i = 0; sent < total && !res.destroyed; i++) {
    const chunk = piece(i);
    sent += Buffer.byteLength(chunk);
    if (!res.write(chunk)) await new Promise<void>((resolve) => res.once('drain', resolve).once('close', resolve));
  }
  res.end();
  return sent;
}

/** A loopback target that answers several hundred megabytes, chunked (no Content-Length to refuse it by). */
async function startHugeTarget() {
  let sent = 0;
  const block = Buffer.alloc(64 * 1024, 'a');
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', async () => {
      const path = req.url ?? '/';
      if (path === '/data') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        sent = await pour(res, HUGE, () => block);
      } else if (path === '/chat/completions') {
        // A model whose answer is one enormous text, as JSON or as an event stream.
        res.writeHead(200, { 'content-type': streamed ? 'text/event-stream' : 'application/json' });
        if (streamed) {
          const event = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'a'.repeat(60_000) }, finish_reason: null }] })}\n\n`;
          sent = await pour(res, HUGE, () => event);
        } else {
          res.write('{"choices": [{"index": 0, "message": {"role": "assistant", "content": "');
          sent = await pour(res, HUGE, () => block);
        }
      } else {
        res.writeHead(404).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, TARGET_HOST, resolve));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://${TARGET_HOST}:${port}`,
    sent: () => sent,
    close: () => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))),
  };
}

/**
 * Runs `call` while sampling the process's memory; answers its result and the peak growth: of the
 * resident set, or of what JavaScript holds (its heap, where strings live, and ArrayBuffers,
 * where bodies are read). Unlike the resident set these fall again after a collection, so an
 * earlier test's peak cannot hide this one's.
 */
async function measured<T>(call: () => Promise<T>): Promise<{ result: T; growth: number }> {
  const held = (m: NodeJS.MemoryUsage) => m.heapUsed + m.arrayBuffers;
  const start = process.memoryUsage();
  let rss = start.rss;
  let js = held(start);
  const sample = () => {
    const now = process.memoryUsage();
    rss = Math.max(rss, now.rss);
    js = Math.max(js, held(now));
  };
  const sampler = setInterval(sample, 5);
  try {
    const result = await call();
    sample();
    return { result, growth: Math.max(rss - start.rss, js - held(start)) };
  } finally {
    clearInterval(sampler);
  }
}

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  huge = await startHugeTarget();
  // The first run of the process loads what every run needs: not part of what is measured.
  const warm = await app.admin.post(`${W}/workflows`, {
    title: 'Warm up',
    trigger: { type: 'manual' },
    nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }],
  });
  expect((await app.admin.post(`${W}/workflows/${warm.body.data.id}/run?wait=true`, { payload: {} })).body.data.status).toBe('success');
});
afterAll(async () => {
  await app?.close();
  await huge?.close();
});

async function connection(type: string, baseUrl: string) {
  const res = await app.admin.post(`${W}/connections`, { type, label: `huge ${type}`, cred: 'secret-cred-0000', extra: { base_url: baseUrl } });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

describe('an answer larger than SVC_EGRESS_RESPONSE_LIMIT', () => {
  it('fails an http_request node with response_too_large, not retried, without reading the answer into memory', async () => {
    const target = await connection('http_bearer', huge.url);
    const created = await app.admin.post(`${W}/workflows`, {
      title: 'Huge download',
      trigger: { type: 'manual' },
      nodes: [{ id: 'get', type: 'http_request', connection_id: target, config: { method: 'GET', path: '/data' }, retry: { max_attempts: 3 } }],
    });
    expect(created.status, created.text).toBe(201);
    const { result: run, growth } = await measured(() =>
      app.admin.post(`${W}/workflows/${created.body.data.id}/run?wait=true&timeout_ms=120000`, { payload: {} }),
    );
    expect(run.body.data.status, run.text).toBe('failed');
    const view = (await app.admin.get(`${W}/executions/${run.body.data.execution_id}`)).body.data;
    expect(view.timeline[0]).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'response_too_large' } });
    expect(view.timeline[0].error.message).toContain(`larger than ${LIMIT} bytes`);
    expect(growth, `resident memory grew by ${Math.round(growth / 1048576)} MiB`).toBeLessThan(GROWTH);
    // The service stopped reading at the limit and dropped the connection: the target could not send it all.
    expect(huge.sent()).toBeLessThan(HUGE / 2);
  });

  it('ends an agent turn with 502 response_too_large whether the model answers as JSON or as a stream, within bounded memory', async () => {
    const model = await providerConnection(app.admin, 'openai', huge.url);
    for (const stream of [false, true]) {
      streamed = stream;
      const created = await app.admin.post(`${A}/sessions`, { provider_id: model, model_id: 'huge' });
      expect(created.status, created.text).toBe(201);
      const { result: turn, growth } = await measured(() =>
        app.admin.post(`${A}/sessions/${created.body.data.session_id}/messages`, { content: 'Tell me everything', stream }),
      );
      if (stream) {
        expect(turn.status, turn.text).toBe(200);
        expect(turn.text).toContain('"code":"response_too_large"');
      } else {
        expect(turn.status, turn.text).toBe(502);
        expect(turn.body).toMatchObject({ error: 'response_too_large' });
      }
      expect(growth, `${stream ? 'streamed' : 'JSON'}: resident memory grew by ${Math.round(growth / 1048576)} MiB`).toBeLessThan(GROWTH);
      expect(huge.sent()).toBeLessThan(HUGE / 2);
    }
  });

  it('fails an llm_prompt node with response_too_large, not retried', async () => {
    streamed = false;
    const model = await providerConnection(app.admin, 'openai', huge.url);
    const created = await app.admin.post(`${W}/workflows`, {
      title: 'Huge model answer',
      trigger: { type: 'manual' },
      nodes: [{ id: 'ask', type: 'llm_prompt', connection_id: model, config: { model: 'huge', prompt: 'everything' }, retry: { max_attempts: 3 } }],
    });
    const { result: run, growth } = await measured(() =>
      app.admin.post(`${W}/workflows/${created.body.data.id}/run?wait=true&timeout_ms=120000`, { payload: {} }),
    );
    expect(run.body.data.status, run.text).toBe('failed');
    const view = (await app.admin.get(`${W}/executions/${run.body.data.execution_id}`)).body.data;
    expect(view.timeline[0]).toMatchObject({ status: 'failed', attempts: 1, error: { code: 'response_too_large' } });
    expect(growth).toBeLessThan(GROWTH);
  });

  it('lets a probe pass on the status alone, without reading the body', async () => {
    const target = await connection('http_bearer', `${huge.url}/data`);
    const { result: probe, growth } = await measured(() => app.admin.post(`${W}/connections/${target}/test`));
    expect(probe.status, probe.text).toBe(200);
    expect(probe.body.data).toEqual({ probe_status: 200 });
    expect(growth).toBeLessThan(GROWTH);
    expect(huge.sent()).toBeLessThan(HUGE / 2);
  });
});
