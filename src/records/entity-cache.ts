import pg from 'pg';
import type { Logger } from '../platform/logger.js';

/**
 * Per-process cache of entity definitions, so a record request does not pay a catalogue query.
 * Every entity change sends NOTIFY on CHANNEL in its transaction (delivered at commit); every
 * process LISTENs on a connection of its own and drops what changed. While that connection is
 * down nothing is cached, so a process never serves a definition it could not hear change.
 *
 * A request that read a definition just before another process's change committed can still use
 * it for a few milliseconds; the table's own constraints stay authoritative, and a query against
 * a column that has gone is answered 409 `entity_changed`.
 */
export const ENTITY_CHANNEL = 'svc_entities';

export class EntityCache<T> {
  private readonly entries = new Map<string, T>();
  /** Bumped by every invalidation: a load that overlapped one is not cached. */
  private generation = 0;
  private client?: pg.Client;
  private listening = false;
  private starting = false;
  private stopped = false;

  constructor(
    private readonly connectionString: string,
    private readonly logger?: Logger,
  ) {}

  /** The cached value, or `load()`'s, which is kept when no invalidation happened meanwhile. */
  async get(key: string, load: () => Promise<T | undefined>): Promise<T | undefined> {
    if (!this.listening) {
      this.listen();
      return load();
    }
    const hit = this.entries.get(key);
    if (hit !== undefined) return hit;
    const generation = this.generation;
    const value = await load();
    if (value !== undefined && this.listening && generation === this.generation) this.entries.set(key, value);
    return value;
  }

  invalidate(key?: string): void {
    this.generation += 1;
    if (key === undefined) this.entries.clear();
    else this.entries.delete(key);
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
      if (err && !this.stopped) this.logger?.warn({ err }, 'entity cache listener lost; caching paused');
      client.end().catch(() => undefined);
    };
    this.client = client;
    client.on('notification', (message) => this.invalidate(message.payload || undefined));
    client.on('error', lost);
    client.on('end', () => lost());
    client
      .connect()
      .then(() => client.query(`listen ${ENTITY_CHANNEL}`))
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
