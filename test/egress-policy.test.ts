import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  EgressDeniedError,
  type EgressFetchOptions,
  EgressPolicy,
  type EgressRequest,
  ResponseTooLargeError,
  TooManyRedirectsError,
  parseEgressAllow,
} from '../src/platform/egress.js';

/**
 * EgressPolicy.fetch and EgressPolicy.call against loopback servers, without the rest of the
 * service: what they connect to, redirects and credentials, and that `call` sends and answers what
 * `fetch` does. The address checks and SVC_EGRESS_ALLOW's parser are tested beside
 * the code (src/platform/egress.test.ts); what a workflow, a probe or a webhook reaches through the
 * running service is test/egress.test.ts.
 */

interface Seen {
  url: string;
  method: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The connection it came on: the client's port. */
  socket: number | undefined;
}

/** What a test server answers. */
interface Answer {
  status?: number;
  headers?: Record<string, string | string[]>;
  body?: string | Buffer;
}

/** A loopback server on `host`, answering with `answer` and recording what it received. */
async function server(host: string, answer: (req: Seen) => Answer = () => ({})) {
  const seen: Seen[] = [];
  const s: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const request = { url: req.url ?? '/', method: req.method ?? 'GET', headers: req.headers, body, socket: req.socket.remotePort };
      seen.push(request);
      const a = answer(request);
      res.writeHead(a.status ?? 200, a.headers ?? {}).end(a.body ?? 'ok');
    });
  });
  await new Promise<void>((ok) => s.listen(0, host, ok));
  const port = (s.address() as { port: number }).port;
  return { seen, port, url: `http://${host}:${port}`, close: () => new Promise<void>((ok) => (s.closeAllConnections(), s.close(() => ok()))) };
}

/**
 * `server`, on a port none of `taken` has. Servers on different addresses can be given the same
 * port, and the allow lists below tell targets apart by port as well as by address.
 */
async function serverApart(taken: { port: number }[], ...args: Parameters<typeof server>) {
  for (;;) {
    const s = await server(...args);
    if (!taken.some((t) => t.port === s.port)) return s;
    await s.close();
  }
}

/** The policy's two ways out: `fetch` (the answer as a stream) and `call` (the answer read whole). */
const VIA = ['fetch', 'call'] as const;
const sendVia =
  (via: (typeof VIA)[number]) =>
  (p: EgressPolicy, url: URL, init: EgressRequest, options: EgressFetchOptions = {}): Promise<{ status: number }> =>
    via === 'fetch' ? p.fetch(url, init, options) : p.call(url, init, options);

describe.each(VIA)('EgressPolicy.%s', (via) => {
  const send = sendVia(via);
  let inside: Awaited<ReturnType<typeof server>>;
  /** What the loopback server had received when the current test began: tests assert on what came after. */
  let seenBefore = 0;
  beforeEach(() => {
    seenBefore = inside?.seen.length ?? 0;
  });
  let allowed: Awaited<ReturnType<typeof server>>;
  let other: Awaited<ReturnType<typeof server>>;
  let policy: EgressPolicy;
  beforeAll(async () => {
    // Something on 127.0.0.1 no user may reach (as the codec listener or the Temporal UI are), and
    // two targets on 127.0.0.2, which the allow list names.
    inside = await server('127.0.0.1');
    other = await serverApart([inside], '127.0.0.2');
    allowed = await serverApart([inside], '127.0.0.2', (req) => {
      // /hop/1 redirects to /hop/2 and so on up to /hop/7: six redirects.
      const hop = /^\/hop\/(\d+)$/.exec(req.url);
      if (hop && Number(hop[1]) < 7) return { status: 302, headers: { location: `/hop/${Number(hop[1]) + 1}` } };
      const to = new URLSearchParams(req.url.split('?')[1] ?? '').get('to');
      if (to) return { status: Number(new URLSearchParams(req.url.split('?')[1]).get('status') ?? 307), headers: { location: to } };
      return {};
    });
    policy = new EgressPolicy(parseEgressAllow('127.0.0.2'), 5);
  });
  afterAll(async () => {
    await Promise.all([inside.close(), allowed.close(), other.close(), policy.close()]);
  });

  const denied = (promise: Promise<unknown>) => expect(promise).rejects.toBeInstanceOf(EgressDeniedError);

  it('refuses a reserved address written in the URL, in every spelling, before connecting', async () => {
    const port = inside.port;
    for (const url of [
      `http://127.0.0.1:${port}/`,
      `http://2130706433:${port}/`,
      `http://0x7f.1:${port}/`,
      `http://[::ffff:127.0.0.1]:${port}/`,
      `http://0.0.0.0:${port}/`,
    ]) {
      await denied(send(policy, new URL(url), {}));
    }
    await denied(send(policy, new URL(`file:///etc/passwd`), {}));
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });

  it('refuses a name that resolves to a reserved address, when it connects', async () => {
    await denied(send(policy, new URL(`http://localhost:${inside.port}/`), {}));
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });

  it('does not tell in its refusal what a name resolved to', async () => {
    const named = new EgressPolicy(parseEgressAllow(''), 5, async () => [
      { address: '10.20.30.40', family: 4 },
      { address: 'fd12:3456::7', family: 6 },
    ]);
    try {
      const refusal = await send(named, new URL('http://db.internal.example:5432/'), {}).catch((err: unknown) => err);
      expect(refusal).toBeInstanceOf(EgressDeniedError);
      const message = (refusal as Error).message;
      expect(message).toContain('db.internal.example');
      for (const address of ['10.20.30.40', 'fd12:3456::7']) expect(message).not.toContain(address);
    } finally {
      await named.close();
    }
  });

  it('reaches an address SVC_EGRESS_ALLOW names through any name that resolves to it, and only there', async () => {
    // The address connected to is what is checked: a name leading to the named address (and port)
    // is let through, the same name leading elsewhere is not.
    const to = (address: string) => new EgressPolicy(parseEgressAllow(`127.0.0.2:${allowed.port}`), 5, async () => [{ address, family: 4 }]);
    const right = to('127.0.0.2');
    const wrong = to('127.0.0.1');
    try {
      expect((await send(right, new URL(`http://api.internal.example:${allowed.port}/named`), {})).status).toBe(200);
      expect(allowed.seen.at(-1)).toMatchObject({ url: '/named', headers: { host: `api.internal.example:${allowed.port}` } });
      await denied(send(right, new URL(`http://api.internal.example:${other.port}/other-port`), {}));
      await denied(send(wrong, new URL(`http://api.internal.example:${inside.port}/`), {}));
    } finally {
      await Promise.all([right.close(), wrong.close()]);
    }
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });

  it('resolves a name when it connects and connects to the address it checked (DNS rebinding)', async () => {
    let answers = 0;
    // A name server that answers an allowed address first and loopback after.
    const rebinding = new EgressPolicy(parseEgressAllow('127.0.0.2'), 5, async () => [{ address: answers++ === 0 ? '127.0.0.2' : '127.0.0.1', family: 4 }]);
    try {
      expect((await send(rebinding, new URL(`http://rebind.example:${allowed.port}/first`), {})).status).toBe(200);
      expect(allowed.seen.at(-1)).toMatchObject({ url: '/first', headers: { host: `rebind.example:${allowed.port}` } });
      await denied(send(rebinding, new URL(`http://rebind.example:${inside.port}/second`), {}));
      // Several answers: the connection goes to one the policy allows, never to the others.
      const mixed = new EgressPolicy(parseEgressAllow('127.0.0.2'), 5, async () => [
        { address: '127.0.0.1', family: 4 },
        { address: '127.0.0.2', family: 4 },
      ]);
      expect((await send(mixed, new URL(`http://mixed.example:${allowed.port}/mixed`), {})).status).toBe(200);
      await mixed.close();
    } finally {
      await rebinding.close();
    }
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });

  it('follows redirects within the policy, checking every hop', async () => {
    const ok = await send(policy, new URL(`${allowed.url}/?to=${encodeURIComponent(`${other.url}/landed`)}`), {});
    expect(ok.status).toBe(200);
    expect(other.seen.at(-1)!.url).toBe('/landed');
    for (const to of [`http://127.0.0.1:${inside.port}/decode`, `http://localhost:${inside.port}/`, `http://[::1]:${inside.port}/`]) {
      await denied(send(policy, new URL(`${allowed.url}/?to=${encodeURIComponent(to)}`), {}));
    }
    expect(inside.seen.slice(seenBefore)).toEqual([]);
  });

  it('caps redirects', async () => {
    expect((await send(policy, new URL(`${allowed.url}/hop/1`), {}, { maxRedirects: 10 })).status).toBe(200);
    await expect(send(policy, new URL(`${allowed.url}/hop/1`), {})).rejects.toBeInstanceOf(TooManyRedirectsError);
    const unfollowed = await send(policy, new URL(`${allowed.url}/hop/1`), {}, { maxRedirects: 0 });
    expect(unfollowed.status).toBe(302);
  });

  it('sends a credential to its own origin only, and drops Authorization and Cookie on leaving it', async () => {
    const credential = { origin: allowed.url, apply: (h: Record<string, string>) => void (h['x-api-key'] = 'the-secret') };
    const headers = { authorization: 'Bearer caller-token', cookie: 'a=b', 'x-trace': 'kept' };
    other.seen.length = 0;
    await send(policy, new URL(`${allowed.url}/?to=${encodeURIComponent(`${other.url}/away`)}`), { headers }, { credential });
    expect(allowed.seen.at(-1)!.headers['x-api-key']).toBe('the-secret');
    const away = other.seen.at(-1)!;
    expect(away.headers['x-api-key']).toBeUndefined();
    expect(away.headers.authorization).toBeUndefined();
    expect(away.headers.cookie).toBeUndefined();
    expect(away.headers['x-trace']).toBe('kept');
    // A redirect that stays on the origin keeps the credential.
    await send(policy, new URL(`${allowed.url}/?to=${encodeURIComponent('/same-origin')}`), { headers }, { credential });
    expect(allowed.seen.at(-1)).toMatchObject({ url: '/same-origin', headers: { 'x-api-key': 'the-secret', authorization: 'Bearer caller-token' } });
  });

  it('turns a POST into a GET without body on 303, and keeps it on 307', async () => {
    await send(policy, new URL(`${allowed.url}/?status=303&to=%2Fafter-303`), {
      method: 'POST',
      body: '{"x":1}',
      headers: { 'content-type': 'application/json' },
    });
    expect(allowed.seen.at(-1)).toMatchObject({ url: '/after-303', method: 'GET', body: '' });
    await send(policy, new URL(`${allowed.url}/?status=307&to=%2Fafter-307`), {
      method: 'POST',
      body: '{"x":1}',
      headers: { 'content-type': 'application/json' },
    });
    expect(allowed.seen.at(-1)).toMatchObject({ url: '/after-307', method: 'POST', body: '{"x":1}' });
  });

  it('lets the allow list name a host, an address or a range, with or without a port', async () => {
    const byName = new EgressPolicy(parseEgressAllow(`localhost:${inside.port}`), 5);
    const byRange = new EgressPolicy(parseEgressAllow(`127.0.0.0/8:${inside.port}`), 5);
    try {
      expect((await send(byName, new URL(`http://localhost:${inside.port}/by-name`), {})).status).toBe(200);
      // The name is allowed, not the address written out, nor another port.
      await denied(send(byName, new URL(`http://127.0.0.1:${inside.port}/`), {}));
      await denied(send(byName, new URL(`http://localhost:${allowed.port}/`), {}));
      expect((await send(byRange, new URL(`http://127.0.0.1:${inside.port}/by-range`), {})).status).toBe(200);
      await denied(send(byRange, new URL(`${allowed.url}/`), {}));
    } finally {
      await Promise.all([byName.close(), byRange.close()]);
    }
    expect(inside.seen.map((r) => r.url)).toEqual(['/by-name', '/by-range']);
  });
});

describe('EgressPolicy.call beside fetch', () => {
  const json = JSON.stringify({ ok: true, items: Array.from({ length: 50 }, (_, i) => ({ i, name: `item ${i}` })) });
  const zeros = Buffer.alloc(1024 * 1024);
  let target: Awaited<ReturnType<typeof server>>;
  let policy: EgressPolicy;
  beforeAll(async () => {
    target = await server('127.0.0.2', (req): Answer => {
      const path = req.url.split('?')[0];
      if (path === '/headers') return { headers: { 'set-cookie': ['a=1', 'b=2'], 'X-Repeated': ['1', '2'], 'Content-Type': 'application/json' }, body: '{}' };
      if (path === '/one-cookie') return { headers: { 'set-cookie': 'sid=x; Expires=Wed, 21 Oct 2037 07:28:00 GMT; HttpOnly' }, body: '{}' };
      if (path === '/moved') {
        const size = Number(new URLSearchParams(req.url.split('?')[1]).get('size'));
        return { status: 302, headers: { location: '/plain' }, body: Buffer.alloc(size, 'r') };
      }
      if (path === '/gzip') return { headers: { 'content-encoding': 'gzip' }, body: gzipSync(json) };
      if (path === '/deflate') return { headers: { 'content-encoding': 'deflate' }, body: deflateSync(json) };
      if (path === '/br') return { headers: { 'content-encoding': 'br' }, body: brotliCompressSync(json) };
      // Codings applied in order: the last one written is undone first.
      if (path === '/gzip-br') return { headers: { 'content-encoding': 'gzip, br' }, body: brotliCompressSync(gzipSync(json)) };
      if (path === '/unknown-coding') return { headers: { 'content-encoding': 'x-custom' }, body: json };
      // A megabyte of zeros in about a kilobyte.
      if (path === '/bomb') return { headers: { 'content-encoding': 'gzip' }, body: gzipSync(zeros) };
      if (path === '/large') return { body: Buffer.alloc(200 * 1024, 'x') };
      return { body: json };
    });
    policy = new EgressPolicy(parseEgressAllow('127.0.0.2'), 5, undefined, 64 * 1024);
  });
  afterAll(async () => {
    await Promise.all([target.close(), policy.close()]);
  });
  const at = (path: string) => new URL(`${target.url}${path}`);

  it('sends the request fetch sends: its default headers, the body, the method', async () => {
    for (const init of [{}, { method: 'POST', headers: { 'content-type': 'application/json', 'x-one': 'a' }, body: '{"x":1}' }, { method: 'HEAD' }]) {
      await policy.fetch(at('/same'), init).then((r) => r.arrayBuffer());
      const byFetch = target.seen.at(-1)!;
      await policy.call(at('/same'), init);
      const { socket: _a, ...byCall } = target.seen.at(-1)!;
      const { socket: _b, ...fetched } = byFetch;
      expect(byCall).toEqual(fetched);
    }
    expect(target.seen.at(-2)!.headers).toMatchObject({ 'accept-encoding': 'gzip, deflate', 'user-agent': 'undici', accept: '*/*' });
  });

  it("answers the status and headers fetch's answer gives, repeated headers joined, and every cookie set", async () => {
    const byFetch = await policy.fetch(at('/headers'), {});
    const byCall = await policy.call(at('/headers'), {});
    const fetched = Object.fromEntries(byFetch.headers);
    await byFetch.arrayBuffer();
    // fetch's Headers keeps each Set-Cookie apart (getSetCookie); Object.fromEntries keeps the last.
    const { date: _a, ...expected }: Record<string, string | string[]> = { ...fetched, 'set-cookie': byFetch.headers.getSetCookie() };
    const { date: _b, ...got } = byCall.headers;
    expect(got).toEqual(expected);
    expect(Object.keys(got)).toEqual(Object.keys(expected));
    expect(got).toMatchObject({ 'x-repeated': '1, 2', 'content-type': 'application/json', 'set-cookie': ['a=1', 'b=2'] });
    expect(byCall.status).toBe(byFetch.status);
  });

  it('answers a single Set-Cookie as a list too, one whose Expires holds a comma whole', async () => {
    const one = await policy.call(at('/one-cookie'), {});
    expect(one.headers['set-cookie']).toEqual(['sid=x; Expires=Wed, 21 Oct 2037 07:28:00 GMT; HttpOnly']);
    expect((await policy.call(at('/plain'), {})).headers['set-cookie']).toBeUndefined();
  });

  it("follows a redirect on the connection that carried it when its body is small, and cuts a large one's off", async () => {
    const sockets = (from: number) => new Set(target.seen.slice(from).map((r) => r.socket)).size;
    // A policy of its own, so no other connection of the pool is idle when the second hop goes.
    for (const [size, connections] of [
      [2000, 1],
      [200 * 1024, 2],
    ] as const) {
      const fresh = new EgressPolicy(parseEgressAllow('127.0.0.2'), 5, undefined, 64 * 1024);
      try {
        const from = target.seen.length;
        const answer = await fresh.call(at(`/moved?size=${size}`), {});
        expect(answer.status).toBe(200);
        expect(target.seen.slice(from).map((r) => r.url)).toEqual([`/moved?size=${size}`, '/plain']);
        expect(sockets(from), `a redirect body of ${size} bytes`).toBe(connections);
      } finally {
        await fresh.close();
      }
    }
  });

  it('decompresses gzip, deflate, br and chained codings as fetch does, and leaves an unknown coding as it came', async () => {
    for (const path of ['/gzip', '/deflate', '/br', '/gzip-br', '/unknown-coding', '/plain']) {
      const byFetch = Buffer.from(await (await policy.fetch(at(path), {})).arrayBuffer());
      const byCall = (await policy.call(at(path), {})).body!;
      expect(byCall.equals(byFetch), path).toBe(true);
      expect(byCall.toString('utf8'), path).toBe(json);
    }
  });

  it('reads at most the limit, counted in decompressed bytes, and drops the rest', async () => {
    await expect(policy.call(at('/bomb'), {})).rejects.toBeInstanceOf(ResponseTooLargeError);
    // Its Content-Length (200 KiB) is over the limit: refused before reading.
    await expect(policy.call(at('/large'), {})).rejects.toThrow(/larger than 65536 bytes/);
    // The connection is usable afterwards.
    expect((await policy.call(at('/plain'), {})).body!.toString()).toBe(json);
  });

  it('does not read the body when told not to', async () => {
    const answer = await policy.call(at('/large'), {}, { readBody: false });
    expect(answer).toMatchObject({ status: 200, body: null });
  });

  it("gives up at its signal, with the signal's reason, before the answer and while its body comes", async () => {
    const held: ServerResponse[] = [];
    const slow = createServer((req, res) => {
      held.push(res);
      // Headers and a first piece of the body, then nothing more.
      if (req.url === '/half') res.writeHead(200, { 'content-length': '100' }).write('x');
    });
    await new Promise<void>((ok) => slow.listen(0, '127.0.0.2', ok));
    const url = `http://127.0.0.2:${(slow.address() as { port: number }).port}`;
    try {
      for (const path of ['/never', '/half']) {
        const started = Date.now();
        const err = await policy.call(new URL(`${url}${path}`), { signal: AbortSignal.timeout(200) }).catch((e: unknown) => e);
        expect((err as Error).name, path).toBe('TimeoutError');
        expect(Date.now() - started, path).toBeLessThan(5000);
      }
    } finally {
      for (const res of held) res.destroy();
      await new Promise<void>((ok) => (slow.closeAllConnections(), slow.close(() => ok())));
    }
  });
});
