import type { Queryable } from '../db/sql.js';
import { sha256 } from './crypto.js';

export interface RateDecision {
  allowed: boolean;
  /** Requests counted in the window, this one included when it was allowed. */
  hits: number;
  /** Seconds until the oldest counted request leaves the window (what Retry-After says). */
  retryAfterSeconds: number;
}

interface PendingHit {
  bucket: string;
  limit: number;
  windowMs: number;
  resolve: (decision: RateDecision) => void;
  reject: (err: unknown) => void;
}

/** Largest number of buckets one statement updates. */
const MAX_BATCH = 500;

/**
 * Bucket names carry caller-chosen text (login names, forwarded addresses). A long or unusual one
 * is stored under a digest, so that it fits the column and cannot fail a batch it shares.
 */
export function storedBucket(name: string, windowSeconds: number): string {
  // The window length is part of the key: a 60 s and a 900 s window of the same name count apart.
  const bucket = `${name}@${windowSeconds}`;
  if (bucket.length <= 200 && /^[\x20-\x7e]*$/.test(bucket)) return bucket;
  return `${bucket.slice(0, 100).replace(/[^\x20-\x7e]/g, '?')}#${sha256(bucket)}`;
}

// The live stamps of a bucket at the statement's time, and how many new requests fit beside them.
const LIVE = `(select count(*) from unnest(r.stamps) s where s > excluded.now_ms - excluded.window_ms)`;
const ADMITTED = `greatest(0, least(excluded.requested, excluded.max_hits - ${LIVE}))::int`;

/**
 * Sliding-window limits in PostgreSQL, so every API process shares the same count. Each bucket
 * keeps the times of the requests it admitted within the last window (at most `limit` of them);
 * a request is admitted while fewer than `limit` lie within the window before it. Unlike a fixed
 * window, which lets a client send its limit at the end of one minute and again at the start of
 * the next, no span of `windowSeconds` ever holds more than `limit` admitted requests. Time is
 * the database's, so processes whose clocks differ still agree.
 *
 * Hits that arrive while a write is in flight are sent together in the next statement (one
 * round trip for many requests under load, none delayed when idle); each is decided in
 * PostgreSQL, under the bucket's row lock, before its caller hears the answer.
 */
export class RateLimiter {
  private calls = 0;
  private queue: PendingHit[] = [];
  private flushing = false;

  constructor(private readonly sql: Queryable) {}

  /** Counts one request in `bucket` when it is within `limit` per `windowSeconds`, and says whether it was. */
  hit(bucket: string, limit: number, windowSeconds: number): Promise<RateDecision> {
    const decision = new Promise<RateDecision>((resolve, reject) => {
      this.queue.push({ bucket: storedBucket(bucket, windowSeconds), limit, windowMs: windowSeconds * 1000, resolve, reject });
      if (!this.flushing) void this.flush();
    });
    this.maybePrune();
    return decision;
  }

  /**
   * Takes back the most recent request counted in `bucket`: an attempt counted before it was
   * checked (a login), which turned out not to be what the limit is about (it succeeded).
   */
  async refund(bucket: string, windowSeconds: number): Promise<void> {
    await this.sql.query('update rate_limit_windows set stamps = stamps[1:cardinality(stamps) - 1] where bucket = ? and cardinality(stamps) > 0', [
      storedBucket(bucket, windowSeconds),
    ]);
  }

  /** Writes queued hits, one statement per batch, until the queue is empty. */
  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length) await this.write(this.queue.splice(0, MAX_BATCH));
    } finally {
      this.flushing = false;
    }
  }

  private async write(batch: PendingHit[]): Promise<void> {
    // One row per bucket (a statement may not update a row twice), in a fixed order so that
    // batches of several processes lock shared buckets in the same order and cannot deadlock.
    const buckets = new Map<string, { limit: number; windowMs: number; waiters: PendingHit[] }>();
    for (const hit of batch) {
      const entry = buckets.get(hit.bucket) ?? buckets.set(hit.bucket, { limit: hit.limit, windowMs: hit.windowMs, waiters: [] }).get(hit.bucket)!;
      entry.waiters.push(hit);
    }
    const names = [...buckets.keys()].sort();
    try {
      const rows = await this.sql.query<{ bucket: string; admitted: number; live: number; oldest: string | null; now_ms: string }>(
        `insert into rate_limit_windows as r (bucket, stamps, admitted, requested, max_hits, window_ms, now_ms)
         select x.bucket, array_fill(t.now_ms, array[least(x.n, x.max_hits)]), least(x.n, x.max_hits), x.n, x.max_hits, x.window_ms, t.now_ms
           from unnest($1::varchar[], $2::int[], $3::int[], $4::bigint[]) with ordinality as x(bucket, n, max_hits, window_ms, position),
                (select (extract(epoch from clock_timestamp()) * 1000)::bigint as now_ms) t
          order by x.position
         on conflict (bucket) do update set
           stamps = array(select s from unnest(r.stamps) s where s > excluded.now_ms - excluded.window_ms order by s)
                    || array_fill(excluded.now_ms, array[${ADMITTED}]),
           admitted = ${ADMITTED},
           requested = excluded.requested, max_hits = excluded.max_hits, window_ms = excluded.window_ms, now_ms = excluded.now_ms
         returning bucket, admitted, cardinality(stamps) as live, stamps[1] as oldest, now_ms`,
        [names, names.map((n) => buckets.get(n)!.waiters.length), names.map((n) => buckets.get(n)!.limit), names.map((n) => buckets.get(n)!.windowMs)],
        { prepared: true },
      );
      const answers = new Map(rows.map((r) => [r.bucket, r]));
      for (const [name, entry] of buckets) {
        const row = answers.get(name);
        if (!row) throw new Error(`rate limiter: no answer for ${name}`);
        const before = row.live - row.admitted;
        const retryAfterMs = row.oldest === null ? entry.windowMs : Number(row.oldest) + entry.windowMs - Number(row.now_ms);
        const retryAfterSeconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
        // The bucket's waiters are decided in arrival order: the first `admitted` of them got in.
        entry.waiters.forEach((w, i) =>
          w.resolve(i < row.admitted ? { allowed: true, hits: before + i + 1, retryAfterSeconds } : { allowed: false, hits: row.live, retryAfterSeconds }),
        );
      }
    } catch (err) {
      for (const hit of batch) hit.reject(err);
    }
  }

  /** Buckets idle for longer than their window are deleted now and then, off the request's critical path. */
  private maybePrune() {
    if (++this.calls % 500 !== 0) return;
    this.sql.query(`delete from rate_limit_windows where now_ms < (extract(epoch from clock_timestamp()) * 1000)::bigint - window_ms`).catch(() => undefined);
  }
}
