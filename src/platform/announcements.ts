import type { Logger } from './logger.js';

/** The largest payload a notification carries whole: PostgreSQL refuses one of 8,000 bytes or more. */
export const NOTIFY_PAYLOAD_BYTES = 7_900;

/** A LISTEN connection shared by the API process (TurnStreamHub): payloads of a channel as sent. */
export interface ListeningHub {
  /** Starts listening to a channel's payloads; resolves once LISTEN is in effect. */
  listen(channel: string, onPayload: (payload: string) => void): Promise<unknown>;
  /** Opens the connection when it is not (listening again on every channel); rejects when PostgreSQL cannot be reached. */
  connected(): Promise<unknown>;
}

/**
 * The announcements of one PostgreSQL channel, each about one thing (a run's record ended, an agent
 * turn answered), waited for by its key. A hint only: an announcement missed (the connection lost,
 * or sent before LISTEN took effect) leaves its waiter pending, and every caller races it against
 * the authoritative answer (Temporal's), which it waits for as it always did.
 */
export class Announcements<T> {
  private subscribed?: Promise<unknown>;
  private readonly waiters = new Map<string, Set<(value: T) => void>>();

  constructor(
    private readonly hub: ListeningHub,
    private readonly channel: string,
    /** An announcement's key and what it says; undefined when it cannot be read (then ignored). */
    private readonly read: (payload: string) => { key: string; value: T } | undefined,
    private readonly logger: Logger,
  ) {}

  /** Resolves with what the announcement of `key` says once it is heard; never rejects; stops listening for it on `signal`. */
  heard(key: string, signal: AbortSignal): Promise<T> {
    return new Promise<T>((resolve) => {
      if (signal.aborted) return;
      let set = this.waiters.get(key);
      if (!set) this.waiters.set(key, (set = new Set()));
      const waiter = (value: T) => resolve(value);
      set.add(waiter);
      signal.addEventListener(
        'abort',
        () => {
          set.delete(waiter);
          if (set.size === 0 && this.waiters.get(key) === set) this.waiters.delete(key);
        },
        { once: true },
      );
      this.listen();
    });
  }

  /** Subscribes once; afterwards only makes sure the connection is open (after a loss, it listens again). */
  private listen(): void {
    this.subscribed ??= this.hub.listen(this.channel, (payload) => {
      const heard = this.read(payload);
      if (heard) this.deliver(heard.key, heard.value);
    });
    this.subscribed
      .then(() => this.hub.connected())
      .catch((err: unknown) => {
        this.logger.warn({ err, channel: this.channel }, 'could not listen for announcements; waits fall back to Temporal');
        this.subscribed = undefined;
      });
  }

  private deliver(key: string, value: T): void {
    const set = this.waiters.get(key);
    if (!set) return;
    this.waiters.delete(key);
    for (const waiter of set) waiter(value);
  }
}
