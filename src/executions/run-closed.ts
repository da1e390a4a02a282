import type { TurnStreamHub } from '../agent/agent.stream.js';
import type { Logger } from '../platform/logger.js';

/**
 * The channel a run's last node announces on once its activity has ended the run's record
 * (success or partial, in one statement with its own timeline entry). The payload is the
 * execution id alone.
 */
export const RUN_CLOSED_CHANNEL = 'svc_run_closed';

/**
 * Hears, on the API process's LISTEN connection (the one agent turn streams use), that a run's
 * record was ended by its last node, so an API waiting for that run's result can answer from the
 * record without waiting for Temporal to close the workflow and for its result's long poll to
 * return. A hint only: a notification missed (the connection lost, or the run ended before LISTEN
 * took effect) leaves the caller waiting on Temporal's result, as it always did.
 */
export class RunClosedListener {
  private subscribed?: Promise<unknown>;
  private readonly waiters = new Map<number, Set<() => void>>();

  constructor(
    private readonly hub: Pick<TurnStreamHub, 'listen' | 'connected'>,
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
      this.listen();
    });
  }

  /** Subscribes once; afterwards only makes sure the connection is open (after a loss, it listens again). */
  private listen(): void {
    this.subscribed ??= this.hub.listen(RUN_CLOSED_CHANNEL, (payload) => this.heard(Number(payload)));
    this.subscribed
      .then(() => this.hub.connected())
      .catch((err: unknown) => {
        this.logger.warn({ err }, 'run-closed listener could not listen; waits fall back to Temporal results');
        this.subscribed = undefined;
      });
  }

  private heard(executionId: number): void {
    const set = this.waiters.get(executionId);
    if (!set) return;
    this.waiters.delete(executionId);
    for (const waiter of set) waiter();
  }
}
