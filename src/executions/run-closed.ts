import type { TurnStreamHub } from '../agent/agent.stream.js';
import type { Logger } from '../platform/logger.js';

/**
 * The channel a run's last node announces on once its activity has ended the run's record
 * (success or partial, in one statement with its own timeline entry). The payload is the ended
 * record as JSON, `{"id", "status", "output"}`, when it fits in CLOSED_PAYLOAD_BYTES, else the
 * execution id alone.
 */
export const RUN_CLOSED_CHANNEL = 'svc_run_closed';

/** The largest payload announced whole: PostgreSQL refuses a notification of 8,000 bytes or more. */
export const CLOSED_PAYLOAD_BYTES = 7_900;

/** What an announcement said of the ended record: its status and output, unless they did not fit. */
export interface ClosedRecord {
  status: string;
  output: unknown;
}

/** An announcement's execution id and, when it carried them, the record's status and output; undefined when unreadable. */
export function readAnnouncement(payload: string): { executionId: number; record?: ClosedRecord } | undefined {
  if (!payload.startsWith('{')) {
    const executionId = Number(payload);
    return /^\d+$/.test(payload) && Number.isSafeInteger(executionId) ? { executionId } : undefined;
  }
  try {
    const { id, status, output } = JSON.parse(payload) as { id: number; status: string; output: unknown };
    return Number.isSafeInteger(id) && typeof status === 'string' ? { executionId: id, record: { status, output: output ?? null } } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Hears, on the API process's LISTEN connection (the one agent turn streams use), that a run's
 * record was ended by its last node, so an API waiting for that run's result can answer from the
 * record without waiting for Temporal to close the workflow and for its result's long poll to
 * return. A hint only: a notification missed (the connection lost, or the run ended before LISTEN
 * took effect) leaves the caller waiting on Temporal's result, as it always did.
 */
export class RunClosedListener {
  private subscribed?: Promise<unknown>;
  private readonly waiters = new Map<number, Set<(record: ClosedRecord | undefined) => void>>();

  constructor(
    private readonly hub: Pick<TurnStreamHub, 'listen' | 'connected'>,
    private readonly logger: Logger,
  ) {}

  /**
   * Resolves when the record of `executionId` is heard ended, with its status and output when the
   * announcement carried them; never rejects; stops listening for it on `signal`.
   */
  closed(executionId: number, signal: AbortSignal): Promise<ClosedRecord | undefined> {
    return new Promise<ClosedRecord | undefined>((resolve) => {
      if (signal.aborted) return;
      let set = this.waiters.get(executionId);
      if (!set) this.waiters.set(executionId, (set = new Set()));
      const waiter = (record: ClosedRecord | undefined) => resolve(record);
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
    this.subscribed ??= this.hub.listen(RUN_CLOSED_CHANNEL, (payload) => {
      const heard = readAnnouncement(payload);
      if (heard) this.heard(heard.executionId, heard.record);
    });
    this.subscribed
      .then(() => this.hub.connected())
      .catch((err: unknown) => {
        this.logger.warn({ err }, 'run-closed listener could not listen; waits fall back to Temporal results');
        this.subscribed = undefined;
      });
  }

  private heard(executionId: number, record: ClosedRecord | undefined): void {
    const set = this.waiters.get(executionId);
    if (!set) return;
    this.waiters.delete(executionId);
    for (const waiter of set) waiter(record);
  }
}
