import { createServer, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ResolvedConnection } from '../src/connections/connection.service.js';
import { HttpCallError, httpCall } from '../src/connections/http-call.js';
import { EgressPolicy, parseEgressAllow } from '../src/platform/egress.js';

/**
 * httpCall, the request an http_request node, an approval's notice and a connection probe make:
 * what it answers and how it names a failure, against a loopback target the allow list names.
 */
describe('httpCall', () => {
  const held: ServerResponse[] = [];
  let target: ReturnType<typeof createServer>;
  let base: string;
  let policy: EgressPolicy;
  const seen: { url: string; headers: Record<string, unknown> }[] = [];
  beforeAll(async () => {
    target = createServer((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers });
      const path = (req.url ?? '').split('?')[0];
      if (path === '/hang') return void held.push(res);
      if (path === '/json') return void res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }).end('{"ok":true,"n":[1,2]}');
      if (path === '/deep') return void res.writeHead(200, { 'content-type': 'application/json' }).end('['.repeat(5000) + ']'.repeat(5000));
      if (path === '/not-json') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{not json');
      res.writeHead(200, { 'content-type': 'text/plain' }).end('plain words');
    });
    await new Promise<void>((ok) => target.listen(0, '127.0.0.2', ok));
    base = `http://127.0.0.2:${(target.address() as { port: number }).port}`;
    policy = new EgressPolicy(parseEgressAllow('127.0.0.2'), 5, async (name) => {
      throw Object.assign(new Error(`${name} does not exist`), { code: 'ENOTFOUND' });
    });
  });
  afterAll(async () => {
    for (const res of held) res.destroy();
    await policy.close();
    await new Promise<void>((ok) => (target.closeAllConnections(), target.close(() => ok())));
  });

  const connection = (baseUrl = base): ResolvedConnection => {
    const credential = { origin: new URL(baseUrl).origin, apply: (h: Record<string, string>) => void (h.authorization = 'Bearer the-secret') };
    return {
      id: 1,
      type: 'http_bearer',
      baseUrl,
      fetch: (url, init) => policy.fetch(url, init, { credential }),
      call: (url, init, readBody) => policy.call(url, init, { credential, ...(readBody === false ? { readBody } : {}) }),
      redact: (value) => value,
    };
  };
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => undefined,
      (err: unknown) => err as HttpCallError,
    );

  it('answers the status, the headers and the body, parsed when it is JSON, with the credential sent', async () => {
    const json = await httpCall(connection(), { method: 'GET', path: '/json', query: { q: 'a b' } }, { timeoutMs: 5000 });
    expect(json).toMatchObject({ status: 200, body: { ok: true, n: [1, 2] }, headers: { 'content-type': 'application/json; charset=utf-8' } });
    expect(seen.at(-1)).toMatchObject({ url: '/json?q=a+b', headers: { authorization: 'Bearer the-secret', accept: 'application/json, */*;q=0.5' } });
    expect((await httpCall(connection(), { method: 'GET', path: '/text' }, { timeoutMs: 5000 })).body).toBe('plain words');
    // JSON that does not parse is answered as the text it is.
    expect((await httpCall(connection(), { method: 'GET', path: '/not-json' }, { timeoutMs: 5000 })).body).toBe('{not json');
    expect(await httpCall(connection(), { method: 'GET', path: '/json' }, { timeoutMs: 5000, readBody: false })).toMatchObject({ status: 200, body: null });
  });

  it('refuses JSON nested too deep to hold', async () => {
    const err = await failure(httpCall(connection(), { method: 'GET', path: '/deep' }, { timeoutMs: 5000 }));
    expect(err).toBeInstanceOf(HttpCallError);
    expect(err).toMatchObject({ reason: 'invalid_response' });
  });

  it('names a timeout, a refused connection and a name that does not resolve', async () => {
    const started = Date.now();
    const timedOut = await failure(httpCall(connection(), { method: 'GET', path: '/hang' }, { timeoutMs: 300 }));
    expect(timedOut).toMatchObject({ reason: 'timeout', message: `No answer from ${new URL(base).host} within 300 ms` });
    expect(Date.now() - started).toBeLessThan(5000);

    const closed = createServer();
    await new Promise<void>((ok) => closed.listen(0, '127.0.0.2', ok));
    const closedPort = (closed.address() as { port: number }).port;
    await new Promise<void>((ok) => closed.close(() => ok()));
    expect(await failure(httpCall(connection(`http://127.0.0.2:${closedPort}`), { method: 'GET', path: '/' }, { timeoutMs: 5000 }))).toMatchObject({
      reason: 'refused',
    });

    expect(await failure(httpCall(connection('http://nowhere.example'), { method: 'GET', path: '/' }, { timeoutMs: 5000 }))).toMatchObject({
      reason: 'dns',
      message: 'Host nowhere.example could not be resolved',
    });
  });

  it("stops at the caller's cancel, whether it comes before or during the call, and not as a timeout", async () => {
    const before = new AbortController();
    before.abort(new Error('cancelled before'));
    const early = await failure(httpCall(connection(), { method: 'GET', path: '/hang' }, { timeoutMs: 60_000, signal: before.signal }));
    expect(early).toMatchObject({ reason: 'network' });

    const during = new AbortController();
    const started = Date.now();
    setTimeout(() => during.abort(new Error('cancelled during')), 200);
    const late = await failure(httpCall(connection(), { method: 'GET', path: '/hang' }, { timeoutMs: 60_000, signal: during.signal }));
    expect(late).toMatchObject({ reason: 'network' });
    expect(late!.message).toContain('cancelled during');
    expect(Date.now() - started).toBeLessThan(5000);
  });
});
