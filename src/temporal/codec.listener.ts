import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { AppError, type HttpErrorCode } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import { codecPayloads, transcode, type CodecPayloads, type EncryptionCodec } from './codec.js';

/**
 * The only address the listener binds. It asks for no credentials, so it is never configurable:
 * whatever HOST says, only a process on this machine can connect to it.
 */
export const LOOPBACK_CODEC_HOST = '127.0.0.1';

export interface LoopbackCodecOptions {
  codec: EncryptionCodec;
  /** 0 takes any free port. */
  port: number;
  /** Origins of the Temporal Web UI whose pages may call it (CORS). */
  uiOrigins: string[];
  bodyLimit: number;
  logger: Logger;
}

export interface LoopbackCodec {
  /** The codec endpoint to give the Temporal Web UI (`--ui-codec-endpoint`) or CLI (`--codec-endpoint`). */
  url: string;
  close(): Promise<void>;
}

const fail = (code: HttpErrorCode, message: string) => new AppError(code, message);

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Past the limit the rest is drained unread; the refusal closes the connection.
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) reject(fail('payload_too_large', 'Request body is larger than the limit'));
      else chunks.push(chunk);
    });
    req.once('end', () => resolve(Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

/** What the listener checks of a request before it reads the body. */
export interface CodecRequestHead {
  host?: string | undefined;
  origin?: string | undefined;
  url?: string | undefined;
  method?: string | undefined;
  contentType?: string | undefined;
}

/**
 * Refuses a request not addressed to a loopback name of the listener (`hosts`, with the port) or
 * sent from a page other than the Temporal Web UI's; answers the caller's origin when it may read
 * the answer (then the answer carries CORS headers).
 */
export function admittedOrigin(head: CodecRequestHead, hosts: Set<string>, allowedOrigins: Set<string>): string | undefined {
  if (!hosts.has((head.host ?? '').toLowerCase())) {
    throw fail('forbidden', `Only requests addressed to ${LOOPBACK_CODEC_HOST} or localhost are answered`);
  }
  const origin = head.origin;
  if (origin !== undefined && !allowedOrigins.has(origin)) throw fail('forbidden', 'Only the Temporal Web UI may call this codec endpoint');
  return origin;
}

/** The operation a request asks for, or `preflight` for a CORS preflight; refuses anything else. */
export function codecOperation(head: CodecRequestHead): 'decode' | 'encode' | 'preflight' {
  // The protocol names the operation by the last path segment, wherever the endpoint is mounted.
  const operation = new URL(head.url ?? '/', 'http://codec').pathname.split('/').pop();
  if (operation !== 'decode' && operation !== 'encode') throw fail('not_found', 'POST /decode or /encode');
  if (head.method === 'OPTIONS') return 'preflight';
  if (head.method !== 'POST') throw fail('method_not_allowed', 'Method not allowed on this path');
  if (!/^application\/json\s*(;|$)/i.test(head.contentType ?? '')) {
    throw fail('unsupported_media_type', 'Send the body as application/json');
  }
  return operation;
}

/** The payloads of a request body in the codec server protocol. */
export function codecRequestPayloads(json: unknown): CodecPayloads {
  const body = codecPayloads.safeParse(json);
  if (!body.success) throw fail('invalid_request', 'Expected {"payloads": [{"metadata"?, "data"?}]} in the codec server protocol');
  return body.data;
}

/** The request body as JSON: 413 past the limit, 400 when it is not JSON. */
async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  try {
    return JSON.parse((await readBody(req, limit)).toString('utf8'));
  } catch (err) {
    if (err instanceof AppError) throw err;
    throw fail('invalid_request', 'Malformed request body');
  }
}

/** Answers one request: a preflight, or the payloads encoded or decoded. */
async function answer(
  req: IncomingMessage,
  res: ServerResponse,
  codec: EncryptionCodec,
  bodyLimit: number,
  allowed: { hosts: Set<string>; origins: Set<string> },
) {
  const head = { host: req.headers.host, origin: req.headers.origin, url: req.url, method: req.method, contentType: req.headers['content-type'] };
  const origin = admittedOrigin(head, allowed.hosts, allowed.origins);
  if (origin !== undefined) {
    res.setHeader('Access-Control-Allow-Origin', origin);
    res.setHeader('Access-Control-Allow-Credentials', 'true');
    res.setHeader('Vary', 'Origin');
  }
  const operation = codecOperation(head);
  if (operation === 'preflight') {
    res.setHeader('Access-Control-Allow-Methods', 'POST');
    res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace');
    res.setHeader('Access-Control-Max-Age', '600');
    res.writeHead(204).end();
    return;
  }
  const payloads = codecRequestPayloads(await readJson(req, bodyLimit));
  const transcoded = JSON.stringify(await transcode(codec, operation, payloads));
  res.writeHead(200, { 'Content-Type': 'application/json' }).end(transcoded);
}

/** Answers a refused or failed request with the error envelope (an unexpected failure is logged, as a 500). */
function answerError(req: IncomingMessage, res: ServerResponse, err: unknown, logger: Logger): void {
  const error = err instanceof AppError ? err : fail('internal_error', 'Internal error');
  if (!(err instanceof AppError)) logger.error({ err }, 'codec listener failed');
  else logger.debug({ status: error.status, code: error.code, origin: req.headers.origin }, 'codec listener refused a request');
  if (res.headersSent) return void res.destroy();
  res.writeHead(error.status, { 'Content-Type': 'application/json', Connection: 'close' });
  res.end(JSON.stringify({ status: 'fail', error: error.code, message: error.message }));
}

/** Listens on `port` of the loopback address; the port it got. */
async function listen(server: Server, port: number): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(err.code === 'EADDRINUSE' ? new Error(`codec listener: port ${port} on ${LOOPBACK_CODEC_HOST} is already in use (set SVC_CODEC_PORT)`) : err),
    );
    server.listen(port, LOOPBACK_CODEC_HOST, () => resolve());
  });
  const address = server.address();
  return typeof address === 'object' && address ? address.port : port;
}

/**
 * The codec server of the embedded default: the Temporal dev server's Web UI decodes payloads
 * through it from the operator's browser, which sends no credentials to another origin. It
 * trusts the connection instead of a caller: it binds loopback only, answers only requests
 * addressed to a loopback name (a page that rebinds its own host name to 127.0.0.1 gets nothing),
 * lets only the UI's pages read answers, and takes JSON only (so another site's form posts and
 * other simple requests, which skip the CORS preflight, are refused before any work).
 */
export async function startLoopbackCodec(options: LoopbackCodecOptions): Promise<LoopbackCodec> {
  const { codec, uiOrigins, bodyLimit, logger } = options;
  // The hosts are known once the port is: until then every request is refused.
  const allowed = { hosts: new Set<string>(), origins: new Set(uiOrigins.map((o) => new URL(o).origin)) };
  const server = createServer((req, res) => {
    answer(req, res, codec, bodyLimit, allowed).catch((err: unknown) => answerError(req, res, err, logger));
  });
  const port = await listen(server, options.port);
  allowed.hosts = new Set([`${LOOPBACK_CODEC_HOST}:${port}`, `localhost:${port}`]);
  return {
    url: `http://${LOOPBACK_CODEC_HOST}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
