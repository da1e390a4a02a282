import { Sql } from '../src/db/sql.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { openOrm } from '../src/db/orm.js';
import { createLogger } from '../src/platform/logger.js';
import { RateLimiter } from '../src/platform/rate-limit.js';
import { startTestApp, type TestApp } from './helpers/app.js';

let app: TestApp;
let otherOrm: MikroORM;

beforeAll(async () => {
  app = await startTestApp();
  // A second pool, as another API process would have.
  otherOrm = await openOrm(app.databaseUrl, createLogger('silent'), 5);
});
afterAll(async () => {
  await otherOrm?.close(true);
  await app?.close();
});

describe('RateLimiter (sliding windows, batched writes)', () => {
  it('admits exactly the limit when many hits arrive at once from two processes', async () => {
    const limiters = [new RateLimiter(app.stack.services.sql), new RateLimiter(new Sql(otherOrm.em.getKnex()))];
    const buckets = ['test:a', 'test:b', 'test:c', 'test:d'];
    const calls = Array.from({ length: 400 }, (_, i) =>
      limiters[i % 2]!.hit(buckets[(i * 7) % buckets.length]!, 60, 3600).then((d) => ({ bucket: buckets[(i * 7) % buckets.length]!, ...d })),
    );
    const decisions = await Promise.all(calls);
    for (const bucket of buckets) {
      const admitted = decisions.filter((d) => d.bucket === bucket && d.allowed);
      // Each admitted hit got its own position in the count, and exactly `limit` were admitted.
      expect(admitted.map((d) => d.hits).sort((a, b) => a - b)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
      expect(decisions.filter((d) => d.bucket === bucket && !d.allowed).every((d) => d.hits === 60)).toBe(true);
    }
    const rows = await app.sql<{ bucket: string; n: number }>(
      `select bucket, cardinality(stamps) as n from rate_limit_windows where bucket like 'test:_@%' order by bucket`,
    );
    expect(rows).toEqual(buckets.map((bucket) => ({ bucket: `${bucket}@3600`, n: 60 })));
  });

  it('never admits more than the limit within any span of the window, across a boundary of fixed windows', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    const hits = (n: number) => Promise.all(Array.from({ length: n }, () => limiter.hit('test:sliding', 5, 2)));
    // Fixed two-second windows start at even seconds: a client that sends its limit just before
    // one starts and again just after it would get twice its limit through them.
    const untilEvenSecond = () => 2000 - (Date.now() % 2000);
    if (untilEvenSecond() < 600) await new Promise((r) => setTimeout(r, untilEvenSecond() + 50));
    // The boundary is fixed once: the first hits may take long enough on a loaded machine to end
    // after it, and measured again it would be the next one, past the sliding window's reach.
    const boundary = Date.now() + untilEvenSecond();
    await new Promise((r) => setTimeout(r, boundary - 300 - Date.now()));
    const first = await hits(5);
    expect(first.every((d) => d.allowed)).toBe(true);
    await new Promise((r) => setTimeout(r, Math.max(0, boundary + 300 - Date.now())));
    const second = await hits(5);
    expect(second.some((d) => d.allowed)).toBe(false);
    // Retry-After says when the oldest admitted hit leaves the window.
    expect(second[0]!.retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(second[0]!.retryAfterSeconds).toBeLessThanOrEqual(2);
    await new Promise((r) => setTimeout(r, second[0]!.retryAfterSeconds * 1000));
    expect((await limiter.hit('test:sliding', 5, 2)).allowed).toBe(true);
  });

  it('takes a hit back with refund', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    for (let i = 0; i < 3; i++) expect((await limiter.hit('test:refund', 3, 60)).allowed).toBe(true);
    expect((await limiter.hit('test:refund', 3, 60)).allowed).toBe(false);
    await limiter.refund('test:refund', 60);
    const again = await limiter.hit('test:refund', 3, 60);
    expect(again).toMatchObject({ allowed: true, hits: 3 });
  });

  it('keeps windows of different lengths apart', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    const [short, long] = await Promise.all([limiter.hit('test:window', 1, 60), limiter.hit('test:window', 1, 900)]);
    expect(short).toMatchObject({ allowed: true, hits: 1 });
    expect(long).toMatchObject({ allowed: true, hits: 1 });
    const refused = await limiter.hit('test:window', 1, 60);
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterSeconds).toBeGreaterThanOrEqual(59);
    expect(refused.retryAfterSeconds).toBeLessThanOrEqual(60);
  });

  it('stores long or unusual bucket names under a digest, so they count like any other', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    const long = `login:${'x'.repeat(300)}:10.0.0.1`;
    const odd = 'login:\u00fcber\u0000:10.0.0.1';
    const [a, b, c] = await Promise.all([limiter.hit(long, 5, 60), limiter.hit(long, 5, 60), limiter.hit(odd, 5, 60)]);
    expect([a.hits, b.hits].sort()).toEqual([1, 2]);
    expect(c.hits).toBe(1);
    expect((await limiter.hit(long, 5, 60)).hits).toBe(3);
    expect((await limiter.hit(`login:${'x'.repeat(300)}:10.0.0.2`, 5, 60)).hits).toBe(1);
  });

  it('fails the waiting hits when PostgreSQL refuses the write, and works again afterwards', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    await app.sql('alter table rate_limit_windows rename to rate_limit_windows_away');
    let results: PromiseSettledResult<unknown>[];
    try {
      results = await Promise.allSettled([limiter.hit('test:down-1', 5, 60), limiter.hit('test:down-2', 5, 60)]);
    } finally {
      await app.sql('alter table rate_limit_windows_away rename to rate_limit_windows');
    }
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect((await limiter.hit('test:down-1', 5, 60)).hits).toBe(1);
  });
});
