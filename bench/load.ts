import { Agent, request } from 'node:http';

/** A small HTTP load generator for loopback benchmarks: latency percentiles and throughput. */

export interface Target {
  method: 'GET' | 'POST';
  url: string;
  headers?: Record<string, string>;
  /** Called per request, so bodies can differ (unique values for inserts). */
  body?: () => string;
  /** Fails the run unless the status matches. */
  expectStatus: number;
}

export interface Figures {
  p50: number;
  p95: number;
  rps: number;
  samples: number;
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

function once(target: Target): Promise<number> {
  const started = performance.now();
  const body = target.body?.();
  return new Promise((resolve, reject) => {
    const req = request(
      target.url,
      {
        method: target.method,
        agent,
        headers: { ...target.headers, ...(body !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {}) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          if (res.statusCode !== target.expectStatus) {
            reject(new Error(`${target.method} ${target.url}: ${res.statusCode} ${Buffer.concat(chunks).toString().slice(0, 500)}`));
          } else resolve(performance.now() - started);
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

/** `count` sequential requests: the latency of one request on an idle server. */
export async function latency(target: Target, count: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push(await once(target));
  return out;
}

/** Requests per second with `concurrency` requests in flight for `seconds` (bounded by `maxRequests`). */
export async function throughput(target: Target, concurrency: number, seconds: number, maxRequests: number): Promise<number> {
  const deadline = performance.now() + seconds * 1000;
  let done = 0;
  let issued = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline && issued < maxRequests) {
        issued += 1;
        await once(target);
        done += 1;
      }
    }),
  );
  return done / ((performance.now() - started) / 1000);
}

export function summarise(samples: number[], rps: number): Figures {
  const sorted = [...samples].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p95: percentile(sorted, 95), rps, samples: samples.length };
}

export async function warmUp(target: Target, count: number): Promise<void> {
  for (let i = 0; i < count; i++) await once(target);
}

export function closeAgent(): void {
  agent.destroy();
}
