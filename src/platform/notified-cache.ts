import pg from 'pg';
import type { Logger } from './logger.js';

/** `value` and everything in it frozen, for a value many requests share: a change to it throws instead of reaching the next request. */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

export interface NotifiedCacheOptions {
  logger?: Logger;
  /** The most values kept; the one used least recently goes first. Unbounded when not given. */
  maxEntries?: number;
}

/**
 * A per-process cache of values read from PostgreSQL, kept only while this process can hear them
 * change. Every change to what it caches sends NOTIFY on `channel` in its transaction (delivered at
 * commit), with the changed key as payload, or an empty payload for "anything may have changed";
 * the cache LISTENs on a connection of its own and drops what the payload names. While that
 * connection is down nothing is cached, so a process never serves a value it could not hear
 * change. A value not found (`load()` answering undefined) is never kept.
 *
 * A request that read a value just before another process's change committed can still use it for
 * the few milliseconds the notification takes; a process that makes a change itself drops the
 * value at once (`invalidate`), so its own next request reads what it wrote.
 */
export class NotifiedCache<T> {
  private readonly entries = new Map<string, T>();
  /** Bumped by every invalidation: a load that overlapped one is not cached. */
  private generation = 0;
  private client?: pg.Client;
  private listening = false;
  private starting = false;
  private stopped = false;

  constructor(
    private readonly connectionString: string,
    private readonly channel: string,
    private readonly options: NotifiedCacheOptions = {},
  ) {
    if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`NotifiedCache: ${channel} is not a plain channel name`);
  }

  /** The cached value, or `load()`'s, which is kept when no invalidation happened meanwhile. */
  async get(key: string, load: () => Promise<T | undefined>): Promise<T | undefined> {
    if (!this.listening) {
      this.listen();
      return load();
    }
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      // Most recently used last: a bounded cache lets the first go.
      if (this.options.maxEntries !== undefined) {
        this.entries.delete(key);
        this.entries.set(key, hit);
      }
      return hit;
    }
    const generation = this.generation;
    const value = await load();
    if (value !== undefined && this.listening && generation === this.generation) this.keep(key, value);
    return value;
  }

  /** Drops `key`, or everything when no key (or an empty one) is given. */
  invalidate(key?: string): void {
    this.generation += 1;
    if (!key) this.entries.clear();
    else this.entries.delete(key);
  }

  /** How many values are kept now. */
  get size(): number {
    return this.entries.size;
  }

  private keep(key: string, value: T): void {
    this.entries.set(key, value);
    const max = this.options.maxEntries;
    if (max === undefined) return;
    for (const oldest of this.entries.keys()) {
      if (this.entries.size <= max) break;
      this.entries.delete(oldest);
    }
  }

  private listen(): void {
    if (this.starting || this.stopped) return;
    this.starting = true;
    const client = new pg.Client({ connectionString: this.connectionString, keepAlive: true });
    const lost = (err?: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      this.listening = false;
      this.starting = false;
      this.invalidate();
      if (err && !this.stopped) this.options.logger?.warn({ err, channel: this.channel }, 'cache listener lost; caching paused');
      client.end().catch(() => undefined);
    };
    this.client = client;
    client.on('notification', (message) => this.invalidate(message.payload || undefined));
    client.on('error', lost);
    client.on('end', () => lost());
    client
      .connect()
      .then(() => client.query(`listen ${this.channel}`))
      .then(() => {
        if (this.client !== client) return;
        this.invalidate();
        this.listening = true;
        this.starting = false;
      })
      .catch((err: Error) => {
        lost(err);
        // Retried by the next get(), at most once a second.
        this.starting = true;
        setTimeout(() => (this.starting = false), 1000).unref();
      });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    const client = this.client;
    this.client = undefined;
    this.listening = false;
    this.entries.clear();
    await client?.end().catch(() => undefined);
  }
}
