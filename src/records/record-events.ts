import type { Logger } from '../platform/logger.js';

/**
 * Record change notifications, for the workflow `record` trigger and anything else that reacts to
 * records. Events are published only after the transaction that made the change has committed
 * (a bulk call publishes its successful operations after its one commit), so a listener never
 * sees a change that was rolled back.
 *
 * Delivery is in-process and at-most-once: listeners run in the API process that made the
 * change, and a crash between commit and delivery loses the event. A listener that needs
 * durability should start something durable (a Temporal workflow) from its callback.
 */

/** A record as the API returns it: `uuid`, `created_at`, `updated_at` and the entity's fields. */
export type RecordData = Record<string, unknown> & { uuid: string };

export interface RecordEvent {
  /** Entity slug. */
  entity: string;
  action: 'created' | 'updated' | 'deleted';
  /** The record after the change; for `deleted`, the record as it was when deleted. */
  record: RecordData;
  /** The record before an update. */
  previous?: RecordData;
}

export type RecordEventListener = (event: RecordEvent) => void | Promise<void>;

export class RecordEventBus {
  private readonly listeners = new Set<RecordEventListener>();

  constructor(private readonly logger?: Logger) {}

  /** Adds a listener; the returned function removes it. */
  subscribe(listener: RecordEventListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /**
   * Delivers events in order to every listener without waiting for them. The change is already
   * committed, so a failing listener is logged and cannot fail the request that made it.
   */
  publish(events: RecordEvent[]): void {
    for (const event of events) {
      for (const listener of this.listeners) {
        Promise.resolve()
          .then(() => listener(event))
          .catch((err) => this.logger?.error({ err, entity: event.entity, action: event.action }, 'record event listener failed'));
      }
    }
  }
}
