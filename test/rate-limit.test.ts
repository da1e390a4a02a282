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

describe('RateLimiter (batched writes)', () => {
  it('counts every hit exactly when many arrive at once from two processes', async () => {
    const limiters = [new RateLimiter(app.stack.services.sql), new RateLimiter(new Sql(otherOrm.em.getKnex()))];
    const buckets = ['test:a', 'test:b', 'test:c', 'test:d'];
    const calls = Array.from({ length: 400 }, (_, i) =>
      limiters[i % 2]!.hit(buckets[(i * 7) % buckets.length]!, 60, 3600).then((d) => ({ bucket: buckets[(i * 7) % buckets.length]!, ...d })),
    );
    const decisions = await Promise.all(calls);
    for (const bucket of buckets) {
      const mine = decisions.filter((d) => d.bucket === bucket);
      // Each hit got its own position in the count, and exactly `limit` were allowed.
      expect(mine.map((d) => d.hits).sort((a, b) => a - b)).toEqual(Array.from({ length: mine.length }, (_, i) => i + 1));
      expect(mine.filter((d) => d.allowed)).toHaveLength(60);
    }
    const rows = await app.sql<{ bucket: string; hits: number }>(`select bucket, hits from rate_limit_counters where bucket like 'test:%' order by bucket`);
    expect(rows).toEqual(buckets.map((bucket) => ({ bucket: `${bucket}@3600`, hits: 100 })));
  });

  it('keeps windows of different lengths apart and reads them with peek', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    const [short, long] = await Promise.all([limiter.hit('test:window', 5, 60), limiter.hit('test:window', 5, 900)]);
    expect(short.hits).toBe(1);
    expect(long.hits).toBe(1);
    expect((await limiter.peek('test:window', 5, 60)).hits).toBe(1);
    expect(short.retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(short.retryAfterSeconds).toBeLessThanOrEqual(60);
  });

  it('stores long or unusual bucket names under a digest, so they count like any other', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    const long = `login:${'x'.repeat(300)}:10.0.0.1`;
    const odd = 'login:\u00fcber\u0000:10.0.0.1';
    const [a, b, c] = await Promise.all([limiter.hit(long, 5, 60), limiter.hit(long, 5, 60), limiter.hit(odd, 5, 60)]);
    expect([a.hits, b.hits].sort()).toEqual([1, 2]);
    expect(c.hits).toBe(1);
    expect((await limiter.peek(long, 5, 60)).hits).toBe(2);
    expect((await limiter.peek(`login:${'x'.repeat(300)}:10.0.0.2`, 5, 60)).hits).toBe(0);
  });

  it('fails the waiting hits when PostgreSQL refuses the write, and works again afterwards', async () => {
    const limiter = new RateLimiter(app.stack.services.sql);
    await app.sql('alter table rate_limit_counters rename to rate_limit_counters_away');
    let results: PromiseSettledResult<unknown>[];
    try {
      results = await Promise.allSettled([limiter.hit('test:down-1', 5, 60), limiter.hit('test:down-2', 5, 60)]);
    } finally {
      await app.sql('alter table rate_limit_counters_away rename to rate_limit_counters');
    }
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect((await limiter.hit('test:down-1', 5, 60)).hits).toBe(1);
  });
});
