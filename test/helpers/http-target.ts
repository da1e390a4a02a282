import { createServer, type IncomingMessage, type Server } from 'node:http';

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

export interface HttpTarget {
  url: string;
  requests: SeenRequest[];
  /** Requests seen for a path (without query). */
  count(path: string): number;
  close(): Promise<void>;
}

/**
 * Where the suite's stand-ins for the outside world listen: a loopback address of their own, which
 * every test app names in SVC_EGRESS_ALLOW. Everything else on loopback (127.0.0.1: PostgreSQL,
 * Temporal, the codec listener) stays out of reach of workflows, as it is in production.
 */
export const TARGET_HOST = '127.0.0.2';

type Handler = (req: SeenRequest) =>
  | {
      status?: number;
      body?: unknown;
      delayMs?: number;
      /** Answers once this settles. */
      until?: Promise<unknown>;
      headers?: Record<string, string | string[]>;
    }
  | undefined;

/** A scripted HTTP server on the targets' loopback address that records every request (to count side effects). */
export async function startHttpTarget(handler: Handler = () => undefined): Promise<HttpTarget> {
  const requests: SeenRequest[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      const seen = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, body };
      requests.push(seen);
      const answer = handler(seen) ?? {};
      if (answer.delayMs) await new Promise((r) => setTimeout(r, answer.delayMs));
      if (answer.until) await answer.until.catch(() => undefined);
      const payload = answer.body === undefined ? { ok: true, path: seen.url } : answer.body;
      res.writeHead(answer.status ?? 200, { 'content-type': typeof payload === 'string' ? 'text/plain' : 'application/json', ...answer.headers });
      res.end(typeof payload === 'string' ? payload : JSON.stringify(payload));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, TARGET_HOST, resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://${TARGET_HOST}:${port}`,
    requests,
    count: (path) => requests.filter((r) => r.url.split('?')[0] === path).length,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Polls `fn` until it returns a truthy value or `timeoutMs` passes. */
export async function eventually<T>(fn: () => Promise<T | undefined | false>, timeoutMs = 60_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
}

/**
 * Local HTTP servers with a fixed behaviour (a broken proxy, a hung backend, a replayed answer),
 * each started on a free port of the targets' loopback address and all closed together.
 */
export function fixedServers() {
  const servers: Server[] = [];
  return {
    async start(handler: Parameters<typeof createServer>[1]): Promise<string> {
      const server = createServer(handler);
      servers.push(server);
      await new Promise<void>((ok) => server.listen(0, TARGET_HOST, ok));
      const address = server.address();
      return `http://${TARGET_HOST}:${typeof address === 'object' && address ? address.port : 0}`;
    },
    async closeAll(): Promise<void> {
      for (const server of servers) server.closeAllConnections();
      await Promise.all(servers.map((s) => new Promise((ok) => s.close(ok))));
    },
  };
}
