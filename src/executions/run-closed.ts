import pg from 'pg';
import type { Logger } from '../platform/logger.js';

/**
 * The channel a run's last node announces on once its activity has ended the run's record
 * (success or partial, in one statement with its own timeline entry). The payload is the
 * execution id alone.
 */
export const RUN_CLOSED_CHANNEL = 'svc_run_closed';

/**
 * Hears, on one LISTEN connection of its own (opened on first use), that a run's record was ended
 * by its last node, so an API waiting for that run's result can answer from the record without
 * waiting for Temporal to close the workflow and for its result's long poll to return. A hint
 * only: a notification missed (the connection lost, or the run ended before LISTEN took effect)
 * leaves the caller waiting on Temporal's result, as it always did.
 */
export class RunClosedListener {
  private client?: pg.Client;
  private connecting?: Promise<pg.Client | undefined>;
  private readonly waiters = new Map<number, Set<() => void>>();

  constructor(
    private readonly databaseUrl: string,
    private readonly logger: Logger,
  ) {}

  /** Resolves when the record of `executionId` is heard ended; never rejects; stops listening for it on `signal`. */
  closed(executionId: number, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      if (signal.aborted) return;
      let set = this.waiters.get(executionId);
      if (!set) this.waiters.set(executionId, (set = new Set()));
      const waiter = () => resolve();
      set.add(waiter);
      signal.addEventListener(
        'abort',
        () => {
          set.delete(waiter);
          if (set.size === 0 && this.waiters.get(executionId) === set) this.waiters.delete(executionId);
        },
        { once: true },
      );
      void this.connect();
    });
  }

  private connect(): Promise<pg.Client | undefined> {
    if (this.client) return Promise.resolve(this.client);
    this.connecting ??= (async () => {
      const client = new pg.Client({ connectionString: this.databaseUrl, keepAlive: true });
      client.on('notification', (message) => {
        if (message.channel !== RUN_CLOSED_CHANNEL) return;
        const id = Number(message.payload);
        const set = this.waiters.get(id);
        if (!set) return;
        this.waiters.delete(id);
        for (const waiter of set) waiter();
      });
      client.on('error', (err) => {
        this.logger.warn({ err }, 'run-closed listener lost; waits fall back to Temporal results');
        if (this.client === client) this.client = undefined;
      });
      try {
        await client.connect();
        await client.query(`listen ${RUN_CLOSED_CHANNEL}`);
      } catch (err) {
        this.logger.warn({ err }, 'run-closed listener could not connect; waits fall back to Temporal results');
        await client.end().catch(() => undefined);
        return undefined;
      }
      this.client = client;
      return client;
    })().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
