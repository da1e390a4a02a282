import type { Knex } from '@mikro-orm/knex';

export interface RateDecision {
  allowed: boolean;
  hits: number;
  retryAfterSeconds: number;
}

/**
 * Fixed-window counters in PostgreSQL, so every API process shares the same count. A window
 * is `windowSeconds` long; the first request past `limit` in a window is refused.
 */
export class RateLimiter {
  private calls = 0;

  constructor(private readonly knex: Knex) {}

  private window(windowSeconds: number) {
    const now = Date.now();
    const start = Math.floor(now / (windowSeconds * 1000)) * windowSeconds * 1000;
    return { start: new Date(start), retryAfterSeconds: Math.max(1, Math.ceil((start + windowSeconds * 1000 - now) / 1000)) };
  }

  /** Counts one request in `bucket` and says whether it is within `limit`. */
  async hit(bucket: string, limit: number, windowSeconds: number): Promise<RateDecision> {
    const { start, retryAfterSeconds } = this.window(windowSeconds);
    const result = await this.knex.raw<{ rows: { hits: number }[] }>(
      `insert into rate_limit_counters (bucket, window_start, hits) values (?, ?, 1)
       on conflict (bucket, window_start) do update set hits = rate_limit_counters.hits + 1
       returning hits`,
      [bucket, start],
    );
    const hits = result.rows[0]!.hits;
    this.maybePrune();
    return { allowed: hits <= limit, hits, retryAfterSeconds };
  }

  /** Reads the count of `bucket` in the current window without adding to it. */
  async peek(bucket: string, limit: number, windowSeconds: number): Promise<RateDecision> {
    const { start, retryAfterSeconds } = this.window(windowSeconds);
    const result = await this.knex.raw<{ rows: { hits: number }[] }>(
      'select hits from rate_limit_counters where bucket = ? and window_start = ?',
      [bucket, start],
    );
    const hits = result.rows[0]?.hits ?? 0;
    return { allowed: hits < limit, hits, retryAfterSeconds };
  }

  /** Old windows are deleted now and then, off the request's critical path. */
  private maybePrune() {
    if (++this.calls % 500 !== 0) return;
    this.knex
      .raw(`delete from rate_limit_counters where window_start < now() - interval '1 day'`)
      .catch(() => undefined);
  }
}
