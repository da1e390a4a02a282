import pg from 'pg';
import type { Queryable } from '../db/sql.js';
import { AppError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';

/**
 * Turn events travel from the activity that produces them (any worker process) to the API process
 * holding the client's event stream through PostgreSQL LISTEN/NOTIFY: no extra server, and
 * notifications of different transactions arrive in commit order, which the end marker relies on.
 */
export type StreamEvent =
  | { event: 'token'; data: { delta: string } }
  | { event: 'tool_call'; data: { tool: string; args: Record<string, unknown> } }
  | { event: 'tool_result'; data: unknown }
  | { event: 'end'; data: null };

/** NOTIFY's payload limit is 8000 bytes; larger tool results are cut to a summary. */
const MAX_PAYLOAD = 7000;

export const turnChannel = (turnId: string) => `agent_turn_${turnId.replace(/-/g, '')}`;

/** Publishes one event of a turn's stream (from an activity or the API). */
export async function publish(sql: Queryable, channel: string, event: StreamEvent): Promise<void> {
  let payload = JSON.stringify(event);
  if (payload.length > MAX_PAYLOAD)
    payload = JSON.stringify({ event: event.event, data: { truncated: true, preview: JSON.stringify(event.data).slice(0, MAX_PAYLOAD / 2) } });
  await sql.query('select pg_notify(?, ?)', [channel, payload], { prepared: true });
}

interface Subscription {
  channel: string;
  onPayload(payload: string): void;
}

/**
 * One dedicated LISTEN connection per API process, shared by every open turn stream and by the
 * API's waits for run results and agent answers (Announcements). After the connection is lost, the next
 * subscription opens a new one and listens again on every channel still subscribed.
 */
export class TurnStreamHub {
  private client?: pg.Client;
  private connecting?: Promise<pg.Client>;
  private readonly subscriptions = new Map<string, Set<Subscription>>();
  /** Event streams each user holds open on this process. */
  private readonly openStreams = new Map<number, number>();

  constructor(
    private readonly databaseUrl: string,
    private readonly logger: Logger,
    /** SVC_AGENT_MAX_STREAMS_PER_USER */
    private readonly maxStreamsPerUser = 5,
  ) {}

  /**
   * Holds one of the user's event streams on this process; throws 429 when they hold the most
   * already. The answer releases it (once).
   */
  claimStream(userId: number): () => void {
    const held = this.openStreams.get(userId) ?? 0;
    if (held >= this.maxStreamsPerUser) {
      throw new AppError(
        'rate_limited',
        `You have ${held} event streams open on this server, the most allowed (SVC_AGENT_MAX_STREAMS_PER_USER); wait for one to end`,
        { retry_after: 1 },
        { 'Retry-After': '1' },
      );
    }
    this.openStreams.set(userId, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.openStreams.get(userId) ?? 1) - 1;
      if (left > 0) this.openStreams.set(userId, left);
      else this.openStreams.delete(userId);
    };
  }

  private connect(): Promise<pg.Client> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= (async () => {
      const client = new pg.Client({ connectionString: this.databaseUrl, keepAlive: true });
      client.on('notification', (message) => {
        const subs = this.subscriptions.get(message.channel);
        if (!subs || !message.payload) return;
        for (const sub of subs) sub.onPayload(message.payload);
      });
      client.on('error', (err) => {
        this.logger.warn({ err }, 'agent stream listener lost');
        if (this.client === client) this.client = undefined;
      });
      await client.connect();
      // Channels subscribed on a connection since lost.
      for (const channel of this.subscriptions.keys()) await client.query(`listen ${pg.escapeIdentifier(channel)}`);
      this.client = client;
      return client;
    })().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  /** Opens the connection when it is not (listening again on every channel subscribed); rejects when PostgreSQL cannot be reached. */
  async connected(): Promise<void> {
    await this.connect();
  }

  /** Starts listening to a turn's events; resolves once LISTEN is in effect, so nothing published after is missed. */
  subscribe(channel: string, onEvent: (event: StreamEvent) => void): Promise<() => Promise<void>> {
    return this.listen(channel, (payload) => {
      let event: StreamEvent;
      try {
        event = JSON.parse(payload) as StreamEvent;
      } catch {
        return;
      }
      onEvent(event);
    });
  }

  /** Starts listening to a channel's payloads as sent; resolves once LISTEN is in effect. */
  async listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    const client = await this.connect();
    const sub = { channel, onPayload };
    let subs = this.subscriptions.get(channel);
    if (!subs) {
      subs = new Set();
      this.subscriptions.set(channel, subs);
      await client.query(`listen ${pg.escapeIdentifier(channel)}`);
    }
    subs.add(sub);
    return async () => {
      subs!.delete(sub);
      if (subs!.size === 0 && this.subscriptions.get(channel) === subs) {
        this.subscriptions.delete(channel);
        await this.client?.query(`unlisten ${pg.escapeIdentifier(channel)}`).catch(() => undefined);
      }
    };
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
