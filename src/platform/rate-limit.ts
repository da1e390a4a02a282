import type { Queryable } from '../db/sql.js';
import { sha256 } from './crypto.js';

export interface RateDecision {
  allowed: boolean;
  hits: number;
  retryAfterSeconds: number;
}

interface PendingHit {
  bucket: string;
  start: Date;
  resolve: (hits: number) => void;
  reject: (err: unknown) => void;
}

/** Largest number of counters one statement updates. */
const MAX_BATCH = 500;

/**
 * Bucket names carry caller-chosen text (login names, forwarded addresses). A long or unusual one
 * is stored under a digest, so that it fits the column and cannot fail a batch it shares.
 */
function storedBucket(name: string, windowSeconds: number): string {
  // The window length is part of the key: a 60 s and a 900 s window of the same name can start
  // at the same instant and must not share a counter.
  const bucket = `${name}@${windowSeconds}`;
  if (bucket.length <= 200 && /^[\x20-\x7e]*$/.test(bucket)) return bucket;
  return `${bucket.slice(0, 100).replace(/[^\x20-\x7e]/g, '?')}#${sha256(bucket)}`;
}

/**
 * Fixed-window counters in PostgreSQL, so every API process shares the same count. A window
 * is `windowSeconds` long; the first request past `limit` in a window is refused.
 *
 * Hits that arrive while a write is in flight are sent together in the next statement (one
 * round trip for many requests under load, none delayed when idle). Every hit is still counted
 * in PostgreSQL before its caller hears the decision, so the count stays exact across processes.
 */
export class RateLimiter {
  private calls = 0;
  private queue: PendingHit[] = [];
  private flushing = false;

  constructor(private readonly sql: Queryable) {}

  private window(windowSeconds: number) {
    const now = Date.now();
    const start = Math.floor(now / (windowSeconds * 1000)) * windowSeconds * 1000;
    return { start: new Date(start), retryAfterSeconds: Math.max(1, Math.ceil((start + windowSeconds * 1000 - now) / 1000)) };
  }

  /** Counts one request in `bucket` and says whether it is within `limit`. */
  async hit(bucket: string, limit: number, windowSeconds: number): Promise<RateDecision> {
    const { start, retryAfterSeconds } = this.window(windowSeconds);
    const hits = await new Promise<number>((resolve, reject) => {
      this.queue.push({ bucket: storedBucket(bucket, windowSeconds), start, resolve, reject });
      if (!this.flushing) void this.flush();
    });
    this.maybePrune();
    return { allowed: hits <= limit, hits, retryAfterSeconds };
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
    // One row per counter (a statement may not update a row twice), in a fixed order so that
    // batches of several processes lock shared counters in the same order and cannot deadlock.
    const counters = new Map<string, { bucket: string; start: Date; waiters: PendingHit[] }>();
    for (const hit of batch) {
      const key = `${hit.start.getTime()}|${hit.bucket}`;
      const counter = counters.get(key) ?? counters.set(key, { bucket: hit.bucket, start: hit.start, waiters: [] }).get(key)!;
      counter.waiters.push(hit);
    }
    const keys = [...counters.keys()].sort();
    try {
      const rows = await this.sql.query<{ key: string; hits: number }>(
        `insert into rate_limit_counters (bucket, window_start, hits)
         select bucket, to_timestamp(start_ms / 1000.0), n
           from unnest($1::varchar[], $2::bigint[], $3::int[]) with ordinality as x(bucket, start_ms, n, position)
          order by position
         on conflict (bucket, window_start) do update set hits = rate_limit_counters.hits + excluded.hits
         returning (extract(epoch from window_start) * 1000)::bigint || '|' || bucket as key, hits`,
        [keys.map((k) => counters.get(k)!.bucket), keys.map((k) => counters.get(k)!.start.getTime()), keys.map((k) => counters.get(k)!.waiters.length)],
        { name: 'rate_limit_hit' },
      );
      const totals = new Map(rows.map((r) => [r.key, r.hits]));
      for (const [key, counter] of counters) {
        const total = totals.get(key);
        if (total === undefined) throw new Error(`rate limiter: no count returned for ${key}`);
        // The waiters of one counter are its last n hits, in arrival order.
        counter.waiters.forEach((w, i) => w.resolve(total - counter.waiters.length + i + 1));
      }
    } catch (err) {
      for (const hit of batch) hit.reject(err);
    }
  }

  /** Reads the count of `bucket` in the current window without adding to it. */
  async peek(bucket: string, limit: number, windowSeconds: number): Promise<RateDecision> {
    const { start, retryAfterSeconds } = this.window(windowSeconds);
    const rows = await this.sql.query<{ hits: number }>('select hits from rate_limit_counters where bucket = ? and window_start = ?', [
      storedBucket(bucket, windowSeconds),
      start,
    ]);
    const hits = rows[0]?.hits ?? 0;
    return { allowed: hits < limit, hits, retryAfterSeconds };
  }

  /** Old windows are deleted now and then, off the request's critical path. */
  private maybePrune() {
    if (++this.calls % 500 !== 0) return;
    this.sql.query(`delete from rate_limit_counters where window_start < now() - interval '1 day'`).catch(() => undefined);
  }
}
