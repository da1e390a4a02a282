import { lookup as dnsLookup } from 'node:dns/promises';
import { BlockList, isIP, isIPv4 } from 'node:net';
import { type Readable, pipeline } from 'node:stream';
import zlib from 'node:zlib';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Agent, type Dispatcher, Response, buildConnector, fetch as undiciFetch } from 'undici';
import { SpanKind, inSpan } from './tracing.js';

/**
 * The egress policy: every outbound call the service makes for a user (workflow nodes, connection
 * probes, model providers, licence vendor webhooks) goes through it. A destination is refused when
 * it is loopback, link-local, private, unique-local, multicast, unspecified or otherwise reserved,
 * unless SVC_EGRESS_ALLOW names it. Names are resolved and each address checked when the socket
 * connects (the address checked is the address connected to, so a name that resolves elsewhere
 * the second time cannot slip through), and again on every redirect hop; redirects are capped.
 */

/** One entry of SVC_EGRESS_ALLOW. */
export type EgressRule =
  | { kind: 'name'; name: string; port?: number }
  | { kind: 'wildcard'; suffix: string; port?: number }
  | { kind: 'address'; list: BlockList; text: string; port?: number };

/** A destination the policy refuses; a node fails with `egress_denied`, a probe answers 4xx. */
export class EgressDeniedError extends Error {
  readonly code = 'egress_denied';
  constructor(message: string) {
    super(message);
    this.name = 'EgressDeniedError';
  }
}

/**
 * An answer whose body is larger than the policy lets a caller read (SVC_EGRESS_RESPONSE_LIMIT):
 * raised by the body's reader at the limit, after which nothing more is read and the connection
 * is dropped.
 */
export class ResponseTooLargeError extends Error {
  readonly code = 'response_too_large';
  constructor(
    readonly limit: number,
    readonly host: string,
  ) {
    super(`The answer from ${host} is larger than ${limit} bytes (SVC_EGRESS_RESPONSE_LIMIT); it was not read past that`);
    this.name = 'ResponseTooLargeError';
  }
}

/** Default of SVC_EGRESS_RESPONSE_LIMIT. */
export const DEFAULT_RESPONSE_LIMIT = 10 * 1024 * 1024;

/** Statuses whose answer has no body (a Response cannot be made with one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * The response with a body that can be read only up to `limit` bytes, whoever reads it and how
 * (`arrayBuffer()`, `json()`, `text()`, iterating an event stream): past the limit the reader fails
 * with ResponseTooLargeError and the source is cancelled, so an endless or huge answer costs at
 * most `limit` bytes of memory. A Content-Length over the limit fails the first read.
 */
export function limitBody(response: Response, limit: number, host: string): Response {
  if (!response.body || NULL_BODY.has(response.status) || response.status < 200 || response.status > 599) return response;
  const source = response.body.getReader();
  const declared = Number(response.headers.get('content-length') ?? NaN);
  let total = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (declared > limit) {
        await source.cancel().catch(() => undefined);
        controller.error(new ResponseTooLargeError(limit, host));
        return;
      }
      const { done, value } = await source.read();
      if (done) return controller.close();
      total += value.byteLength;
      if (total > limit) {
        await source.cancel().catch(() => undefined);
        controller.error(new ResponseTooLargeError(limit, host));
        return;
      }
      controller.enqueue(value);
    },
    cancel: (reason) => source.cancel(reason),
  });
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
}

/** An answer `EgressPolicy.call` read whole. */
export interface EgressAnswer {
  status: number;
  /**
   * Header names in lower case, in order of name, a repeated header's values joined with ", " as
   * fetch's `Headers.get` joins them; but `set-cookie`, a list of every Set-Cookie the answer
   * carries in the order sent (a cookie's own Expires holds a comma, so joined they could not be
   * told apart; `Object.fromEntries` of a fetch answer keeps only the last).
   */
  headers: AnswerHeaders;
  /** The body, decompressed, or null when it was not read. */
  body: Buffer | null;
}

/** An answer's headers: each a string, but `set-cookie`, every cookie the answer sets. */
export type AnswerHeaders = Record<string, string> & { 'set-cookie'?: string[] };

/** Adds the headers fetch adds to a request that does not set them (to this hop's own copy): a target sees the same request from `call` as from `fetch`. */
function withFetchDefaults(headers: Record<string, string>, url: URL): Record<string, string> {
  headers.accept ??= '*/*';
  headers['accept-language'] ??= '*';
  headers['sec-fetch-mode'] ??= 'cors';
  headers['user-agent'] ??= 'undici';
  headers['accept-encoding'] ??= url.protocol === 'https:' ? 'br, gzip, deflate' : 'gzip, deflate';
  return headers;
}

const headerText = (value: string | string[] | undefined): string | undefined => (Array.isArray(value) ? value.join(', ') : value);

function answerHeaders(raw: Record<string, string | string[] | undefined>): AnswerHeaders {
  const out: Record<string, string | string[]> = {};
  for (const name of Object.keys(raw).sort()) {
    const value = raw[name];
    if (value === undefined) continue;
    out[name] = name === 'set-cookie' ? (Array.isArray(value) ? value : [value]) : headerText(value)!;
  }
  return out as AnswerHeaders;
}

/** Drops an answer's body without reading it (the connection is not kept when it was not finished). */
async function discardBody(body: Readable): Promise<void> {
  body.on('error', () => undefined);
  body.destroy();
}

/** The most of a redirect's body read (and dropped) so that its connection serves the next hop. */
const REDIRECT_BODY_DRAINED = 64 * 1024;

/**
 * Drops a redirect's body: read to its end when it is at most REDIRECT_BODY_DRAINED bytes, so the
 * connection is kept for the next hop (most redirects stay on their origin), else cut off as
 * discardBody does. The caller's signal ends the read. The connection goes back to its pool only
 * after the read has ended (in undici's next turn of the event loop): the next hop waits for that
 * turn, or it would find the connection still busy and open another.
 */
async function drainRedirect(body: Dispatcher.ResponseData['body'], signal: AbortSignal | undefined): Promise<void> {
  await body.dump({ limit: REDIRECT_BODY_DRAINED, ...(signal ? { signal } : {}) }).catch(() => undefined);
  await nextTurn();
}

/**
 * The decompressors for a Content-Encoding, as fetch makes them (lenient flushing, at most five
 * codings, the last applied first); none when a coding is unknown, and the body is then read as
 * it came.
 */
function decodersFor(contentEncoding: string | undefined): (() => NodeJS.ReadWriteStream)[] {
  if (!contentEncoding) return [];
  const codings = contentEncoding.toLowerCase().split(',');
  if (codings.length > 5) throw new Error(`too many content-encodings in response: ${codings.length}, maximum allowed is 5`);
  const decoders: (() => NodeJS.ReadWriteStream)[] = [];
  for (let i = codings.length - 1; i >= 0; i--) {
    const coding = codings[i]!.trim();
    if (coding === 'gzip' || coding === 'x-gzip')
      decoders.push(() => zlib.createGunzip({ flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH }));
    else if (coding === 'deflate') decoders.push(() => zlib.createInflate({ flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH }));
    else if (coding === 'br')
      decoders.push(() => zlib.createBrotliDecompress({ flush: zlib.constants.BROTLI_OPERATION_FLUSH, finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH }));
    else return [];
  }
  return decoders;
}

/**
 * Reads a body whole, decompressed, failing with ResponseTooLargeError past `limit` bytes (of what
 * it decompresses to; a declared Content-Length over the limit fails at once), after which nothing
 * more is read and the connection is dropped.
 */
async function readWithin(body: Readable, contentEncoding: string | undefined, declared: number, limit: number, host: string): Promise<Buffer> {
  let decoders: (() => NodeJS.ReadWriteStream)[];
  try {
    if (declared > limit) throw new ResponseTooLargeError(limit, host);
    decoders = decodersFor(contentEncoding);
  } catch (err) {
    await discardBody(body);
    throw err;
  }
  // Errors of any stream of the pipeline reach the reader through its last.
  const source: Readable = decoders.length ? (pipeline([body, ...decoders.map((make) => make())], () => undefined) as unknown as Readable) : body;
  const chunks: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of source as AsyncIterable<Buffer>) {
      total += chunk.byteLength;
      if (total > limit) throw new ResponseTooLargeError(limit, host);
      chunks.push(chunk);
    }
  } catch (err) {
    if (source !== body) source.destroy();
    await discardBody(body);
    throw err;
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
}

/** A chain of redirects longer than the policy allows. */
export class TooManyRedirectsError extends Error {
  readonly code = 'too_many_redirects';
  constructor(readonly limit: number) {
    super(`More than ${limit} redirects`);
    this.name = 'TooManyRedirectsError';
  }
}

// Ranges no user's call may reach unless an operator names them. An IPv6 address that carries an
// IPv4 address (mapped, compatible, translated, NAT64, 6to4) is also checked as that IPv4 address.
const IPV4_RESERVED: [string, number][] = [
  ['0.0.0.0', 8], // "this network", the unspecified address
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata services
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, and the broadcast address
];
const IPV6_RESERVED: [string, number][] = [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['64:ff9b:1::', 48], // NAT64 for local use (RFC 8215): translates into private networks
  ['100::', 64], // discard
  ['2001::', 32], // Teredo (tunnels to any IPv4 address)
  ['2001:db8::', 32], // documentation
  ['fc00::', 7], // unique-local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
];

const reserved = new BlockList();
for (const [net, prefix] of IPV4_RESERVED) reserved.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of IPV6_RESERVED) reserved.addSubnet(net, prefix, 'ipv6');

/** The eight 16-bit groups of an IPv6 address. */
function ipv6Groups(address: string): number[] {
  let text = address;
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[1]!.split('.').map(Number) as [number, number, number, number];
    text = text.slice(0, -dotted[1]!.length) + `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const part = (s: string | undefined) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  const left = part(head);
  const right = part(tail);
  return tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill(0), ...right];
}

/**
 * The IPv4 address an IPv6 address carries, if any: IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible
 * (::a.b.c.d, deprecated but still routed to the IPv4 address by some stacks), IPv4-translated
 * (::ffff:0:a.b.c.d), NAT64 (64:ff9b::/96) or 6to4 (2002::/16).
 */
function embeddedIpv4(address: string): string | undefined {
  const g = ipv6Groups(address);
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zero(0, 5) && (g[5] === 0 || g[5] === 0xffff)) return v4(g[6]!, g[7]!);
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return v4(g[6]!, g[7]!);
  if (g[0] === 0x64 && g[1] === 0xff9b && zero(2, 6)) return v4(g[6]!, g[7]!);
  if (g[0] === 0x2002) return v4(g[1]!, g[2]!);
  return undefined;
}

/** Whether an address lies in a range no user may reach by default. */
export function isReservedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return reserved.check(address, 'ipv4');
  if (family !== 6) return true;
  if (reserved.check(address, 'ipv6')) return true;
  const inner = embeddedIpv4(address);
  return inner !== undefined && reserved.check(inner, 'ipv4');
}

const hostLabel = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

function portOf(text: string | undefined, entry: string): number | undefined {
  if (text === undefined) return undefined;
  const port = Number(text);
  if (!/^\d{1,5}$/.test(text) || port < 1 || port > 65535) throw new Error(`${entry}: ${text} is not a port`);
  return port;
}

function addressRule(text: string, port: number | undefined, entry: string): EgressRule {
  const [address, prefixText] = text.split('/') as [string, string | undefined];
  const family = isIP(address);
  if (!family) throw new Error(`${entry}: ${address} is not an IP address`);
  const max = family === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (prefixText !== undefined && (!/^\d{1,3}$/.test(prefixText) || prefix > max)) throw new Error(`${entry}: /${prefixText} is not a prefix length`);
  const list = new BlockList();
  list.addSubnet(address, prefix, family === 4 ? 'ipv4' : 'ipv6');
  return { kind: 'address', list, text, ...(port !== undefined ? { port } : {}) };
}

/**
 * Reads SVC_EGRESS_ALLOW: comma-separated host names (`api.internal`), `*.` wildcards
 * (`*.corp.example`, any name below it), IP addresses and CIDR ranges (`10.1.0.0/16`,
 * `fd00::/8`), each optionally with `:port` (IPv6 in brackets then: `[::1]:8080`,
 * `[fd00::/8]:443`). Throws naming the first entry it cannot read.
 */
export function parseEgressAllow(text: string | undefined): EgressRule[] {
  const rules: EgressRule[] = [];
  for (const raw of (text ?? '').split(',')) {
    const entry = raw.trim();
    if (!entry) continue;
    const bracketed = /^\[([^\]]+)\](?::(.*))?$/.exec(entry);
    if (bracketed) {
      rules.push(addressRule(bracketed[1]!, portOf(bracketed[2], entry), entry));
      continue;
    }
    // A bare IPv6 address (or range) has several colons and no port.
    if ((entry.match(/:/g) ?? []).length > 1) {
      rules.push(addressRule(entry, undefined, entry));
      continue;
    }
    const [host, portText] = entry.split(':') as [string, string | undefined];
    const port = portOf(portText, entry);
    if (isIPv4(host.split('/')[0]!)) {
      rules.push(addressRule(host, port, entry));
      continue;
    }
    const name = host.toLowerCase().replace(/\.$/, '');
    if (name.startsWith('*.')) {
      if (!hostLabel.test(name.slice(2))) throw new Error(`${entry}: ${name.slice(2)} is not a host name`);
      rules.push({ kind: 'wildcard', suffix: name.slice(1), ...(port !== undefined ? { port } : {}) });
    } else {
      if (!hostLabel.test(name)) throw new Error(`${entry}: ${host} is not a host name, an IP address or a range`);
      rules.push({ kind: 'name', name, ...(port !== undefined ? { port } : {}) });
    }
  }
  return rules;
}

const portMatches = (rule: { port?: number }, port: number) => rule.port === undefined || rule.port === port;
const bare = (host: string) =>
  host
    .replace(/^\[|\]$/g, '')
    .toLowerCase()
    .replace(/\.$/, '');
const defaultPort = (protocol: string) => (protocol === 'https:' ? 443 : 80);

/** A request as the policy sends it: header names in lower case. */
export interface EgressRequest {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  signal?: AbortSignal;
}

export interface EgressFetchOptions {
  /**
   * A credential that may go to one origin only: applied to requests for that origin, never to a
   * redirect elsewhere (where the caller's own Authorization, Cookie and Proxy-Authorization
   * headers are dropped too).
   */
  credential?: { origin: string; apply(headers: Record<string, string>): void };
  /** Redirects to follow; 0 answers a redirect as it is. Default: the policy's limit. */
  maxRedirects?: number;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const CROSS_ORIGIN_DROPPED = ['authorization', 'cookie', 'proxy-authorization'];

/** The egress policy of one process: the allow list, the connect-time check and the fetch that uses both. */
export class EgressPolicy {
  readonly dispatcher: Agent;

  constructor(
    private readonly rules: EgressRule[],
    readonly maxRedirects = 5,
    /** How names are resolved (replaced in tests to stand for a name server that changes its answer). */
    private readonly resolve: (name: string) => Promise<{ address: string; family: number }[]> = (name) => dnsLookup(name, { all: true }),
    /** The most bytes of an answer's body a caller may read (SVC_EGRESS_RESPONSE_LIMIT). */
    readonly responseLimit = DEFAULT_RESPONSE_LIMIT,
  ) {
    const connect = buildConnector({});
    this.dispatcher = new Agent({
      connect: (options, callback) => {
        const port = Number(options.port) || defaultPort(options.protocol);
        const host = bare(options.hostname);
        this.addressesFor(host, port).then(
          (address) =>
            // The socket goes to the address that was checked; TLS still verifies the name.
            connect({ ...options, hostname: address ?? options.hostname, ...(address && !isIP(host) ? { servername: host } : {}) }, callback),
          (err: Error) => callback(err, null),
        );
      },
    });
  }

  /** The rules, from SVC_EGRESS_ALLOW (see parseEgressAllow) and SVC_EGRESS_MAX_REDIRECTS. */
  static fromConfig(config: { SVC_EGRESS_ALLOW?: string | undefined; SVC_EGRESS_MAX_REDIRECTS: number; SVC_EGRESS_RESPONSE_LIMIT: number }): EgressPolicy {
    return new EgressPolicy(parseEgressAllow(config.SVC_EGRESS_ALLOW), config.SVC_EGRESS_MAX_REDIRECTS, undefined, config.SVC_EGRESS_RESPONSE_LIMIT);
  }

  private nameAllowed(host: string, port: number): boolean {
    return this.rules.some(
      (r) =>
        (r.kind === 'name' ? r.name === host : r.kind === 'wildcard' ? host.endsWith(r.suffix) && host.length > r.suffix.length : false) &&
        portMatches(r, port),
    );
  }

  /** Whether a connection to this address and port may be made. */
  addressAllowed(address: string, port: number): boolean {
    const family = isIP(address) === 4 ? 'ipv4' : 'ipv6';
    if (this.rules.some((r) => r.kind === 'address' && r.list.check(address, family) && portMatches(r, port))) return true;
    return !isReservedAddress(address);
  }

  /**
   * The address to connect to for `host`: the host itself when it is an allowed address, none
   * (let the system resolve) for a name the allow list names, else the first resolved address the
   * policy allows: a public one, or one an address rule names. An address rule opens its address
   * to any name that resolves to it: the address connected to is what is checked, so a name adds
   * no reach, and internal services reached over https need their names for TLS to verify.
   * Throws EgressDeniedError when there is none.
   */
  private async addressesFor(host: string, port: number): Promise<string | undefined> {
    if (isIP(host)) {
      if (!this.addressAllowed(host, port)) throw new EgressDeniedError(`${host}:${port} is a private or reserved address; SVC_EGRESS_ALLOW does not name it`);
      return host;
    }
    if (this.nameAllowed(host, port)) return undefined;
    let resolved: { address: string }[];
    try {
      resolved = await this.resolve(host);
    } catch (err) {
      throw Object.assign(new Error(`Host ${host} could not be resolved`), { code: (err as { code?: string }).code ?? 'ENOTFOUND' });
    }
    const allowed = resolved.find((r) => this.addressAllowed(r.address, port));
    // The refusal does not say what the name resolved to: whoever reads it (a workflow's editor)
    // would learn the addresses of the service's private neighbours.
    if (!allowed) throw new EgressDeniedError(`${host}:${port} resolves only to private or reserved addresses, and SVC_EGRESS_ALLOW names none of them`);
    return allowed.address;
  }

  /** Refuses a URL the policy can judge before connecting: its scheme, and an address written in it. */
  precheck(url: URL): void {
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new EgressDeniedError(`${url.protocol} URLs are not fetched; only http and https`);
    const host = bare(url.hostname);
    const port = Number(url.port) || defaultPort(url.protocol);
    if (isIP(host) && !this.addressAllowed(host, port)) {
      throw new EgressDeniedError(`${host}:${port} is a private or reserved address; SVC_EGRESS_ALLOW does not name it`);
    }
  }

  /**
   * fetch() within the policy: each hop is checked before and when it connects, redirects are
   * followed by hand (at most `maxRedirects`, with fetch's method rules), and a credential goes to
   * its own origin only. Refusals throw EgressDeniedError (also when wrapped by fetch's "fetch
   * failed"), too long a chain TooManyRedirectsError. The answer's body reads at most
   * `responseLimit` bytes (ResponseTooLargeError past it).
   */
  fetch(input: URL, init: EgressRequest, options: EgressFetchOptions = {}): Promise<Response> {
    const method = (init.method ?? 'GET').toUpperCase();
    // One client span per call (redirects included); the host, never the path or query (they can carry tokens).
    return inSpan(
      `HTTP ${method}`,
      { 'http.request.method': method, 'server.address': input.hostname, 'server.port': Number(input.port) || defaultPort(input.protocol) },
      async (span) => {
        const response = await this.send(input, init, options);
        span.setAttribute('http.response.status_code', response.status);
        // The answer comes from the last hop (a redirect may lead to another host).
        const host = URL.canParse(response.url) ? new URL(response.url).host : input.host;
        return limitBody(response, this.responseLimit, host);
      },
      SpanKind.CLIENT,
    );
  }

  private send(input: URL, init: EgressRequest, options: EgressFetchOptions): Promise<Response> {
    return this.follow<Response>(
      input,
      init,
      options,
      (url, method, headers, body) =>
        undiciFetch(url, {
          method,
          headers,
          ...(body !== undefined ? { body } : {}),
          ...(init.signal ? { signal: init.signal } : {}),
          redirect: 'manual',
          dispatcher: this.dispatcher,
        }),
      (response) => ({
        status: response.status,
        location: response.headers.get('location'),
        discard: async () => {
          await response.body?.cancel().catch(() => undefined);
        },
      }),
    ).then(({ answer }) => answer);
  }

  /**
   * One request, with the answer read whole: the same policy, redirects and credential rule as
   * `fetch`, and the same request as fetch sends (its default headers, compressed answers accepted
   * and decompressed), made through the dispatcher directly rather than through web streams and
   * their promises, which cost a call several times the CPU of the exchange itself. For callers
   * that want the body as bytes (a node's HTTP call, a probe); a caller that streams the answer
   * uses `fetch`. Refusals throw as `fetch`'s do; a network failure throws undici's error itself
   * (its `code`: ECONNREFUSED, ENOTFOUND and the like), and an abort the signal's reason. With
   * `readBody: false` the body is not read.
   */
  call(input: URL, init: EgressRequest, options: EgressFetchOptions & { readBody?: boolean } = {}): Promise<EgressAnswer> {
    const method = (init.method ?? 'GET').toUpperCase();
    return inSpan(
      `HTTP ${method}`,
      { 'http.request.method': method, 'server.address': input.hostname, 'server.port': Number(input.port) || defaultPort(input.protocol) },
      async (span) => {
        const { answer, url } = await this.follow<Dispatcher.ResponseData>(
          input,
          init,
          options,
          (hopUrl, hopMethod, headers, body) =>
            this.dispatcher.request({
              origin: hopUrl.origin,
              path: `${hopUrl.pathname}${hopUrl.search}`,
              method: hopMethod as Dispatcher.HttpMethod,
              headers: withFetchDefaults(headers, hopUrl),
              ...(body !== undefined ? { body } : {}),
              ...(init.signal ? { signal: init.signal } : {}),
            }),
          (response) => ({
            status: response.statusCode,
            location: headerText(response.headers.location) ?? null,
            discard: () => drainRedirect(response.body, init.signal),
          }),
        );
        span.setAttribute('http.response.status_code', answer.statusCode);
        const headers = answerHeaders(answer.headers);
        if (options.readBody === false) {
          await discardBody(answer.body);
          return { status: answer.statusCode, headers, body: null };
        }
        const encoding = method === 'HEAD' || NULL_BODY.has(answer.statusCode) ? undefined : headers['content-encoding'];
        const body = await readWithin(answer.body, encoding, Number(headers['content-length'] ?? NaN), this.responseLimit, url.host);
        return { status: answer.statusCode, headers, body };
      },
      SpanKind.CLIENT,
    );
  }

  /**
   * Sends a request hop by hop: each hop is checked before it is sent (and when it connects, by the
   * dispatcher), the caller's credential goes to its own origin only, the caller's Authorization,
   * Cookie and Proxy-Authorization headers never to another origin, and a redirect is followed with
   * fetch's method rules, at most `maxRedirects` times (TooManyRedirectsError past it).
   */
  private async follow<A>(
    input: URL,
    init: EgressRequest,
    options: EgressFetchOptions,
    exchange: (url: URL, method: string, headers: Record<string, string>, body: string | Uint8Array | undefined) => Promise<A>,
    redirectOf: (answer: A) => { status: number; location: string | null; discard: () => Promise<unknown> },
  ): Promise<{ answer: A; url: URL }> {
    const limit = options.maxRedirects ?? this.maxRedirects;
    const firstOrigin = input.origin;
    let url = input;
    let method = (init.method ?? 'GET').toUpperCase();
    let body = init.body;
    for (let hop = 0; ; hop++) {
      this.precheck(url);
      const headers: Record<string, string> = { ...init.headers };
      if (url.origin !== firstOrigin) for (const name of CROSS_ORIGIN_DROPPED) delete headers[name];
      if (options.credential && url.origin === options.credential.origin) options.credential.apply(headers);
      if (body === undefined) delete headers['content-type'];
      let answer: A;
      try {
        answer = await exchange(url, method, headers, body);
      } catch (err) {
        throw unwrapEgress(err);
      }
      const { status, location, discard } = redirectOf(answer);
      if (!REDIRECTS.has(status) || location === null || limit === 0) return { answer, url };
      await discard();
      if (hop >= limit) throw new TooManyRedirectsError(limit);
      try {
        url = new URL(location, url);
      } catch {
        throw new EgressDeniedError(`The redirect to ${location.slice(0, 200)} is not a URL`);
      }
      // As fetch does: 303 turns any method but HEAD into GET, 301/302 turn POST into GET; the body goes.
      if ((status === 303 && method !== 'HEAD') || ((status === 301 || status === 302) && method === 'POST')) {
        method = method === 'HEAD' ? 'HEAD' : 'GET';
        body = undefined;
      }
    }
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }
}

/** The policy's refusal when fetch wrapped it ("fetch failed", cause: the refusal), else the error itself. */
export function unwrapEgress(err: unknown): unknown {
  for (let cause: unknown = err, depth = 0; cause && depth < 5; cause = (cause as { cause?: unknown }).cause, depth++) {
    if (cause instanceof EgressDeniedError) return cause;
  }
  return err;
}
