import { WorkflowNotFoundError } from '@temporalio/client';
import type { Metrics } from '../platform/metrics.js';
import type { TemporalHandle } from '../temporal/connection.js';
import type { ReceivedEvent } from '../../workflows/defs.js';
import { eventDeliveredSignal } from '../../workflows/run.signals.js';
import { checkEventData, MAX_LOOKBACK_MS } from './event.limits.js';
import type { EventStore, ReachedWait } from './event.store.js';

/** An event to send: its name, correlation key and data. */
export interface OutgoingEvent {
  name: string;
  key: string;
  data?: unknown;
}

/**
 * Sending events to the runs that wait for them: through POST /events (as the caller) or an
 * emit_event node (as the people its run acts for). An event reaches a wait only when every one
 * of its senders may see the waiting run's workflow; it is kept for the longest lookback, so a
 * wait that begins shortly after still takes it.
 */
export class EventService {
  constructor(
    private readonly store: EventStore,
    private readonly temporal: TemporalHandle,
    private readonly metrics?: Pick<Metrics, 'workflowEvents'>,
  ) {}

  /**
   * Sends `event` as `senderIds` (all of whom must be able to see a run for it to reach it).
   * `origin` makes a sending happen once however often it is asked (an emit_event node's retried
   * activity). Answers the event's id and the executions it resumed.
   */
  async send(senderIds: number[], event: OutgoingEvent, source: 'api' | 'node', origin?: string): Promise<{ event_id: number; delivered: number[] }> {
    checkEventData(event.data);
    const sent = await this.store.send(
      { name: event.name, key: event.key, data: event.data ?? null, senderIds: [...new Set(senderIds)], ...(origin ? { origin } : {}) },
      (wait, received) => this.wake(wait, received),
    );
    if (!sent.repeated) this.metrics?.workflowEvents.inc({ source, delivered: sent.delivered.length ? 'yes' : 'no' });
    return { event_id: sent.eventId, delivered: sent.delivered };
  }

  /** Signals the run of a wait its event; false when the run is gone (it ended or was reset away). */
  private async wake(wait: ReachedWait, event: ReceivedEvent): Promise<boolean> {
    try {
      await this.temporal.client.workflow.getHandle(wait.temporal_workflow_id, wait.temporal_run_id).signal(eventDeliveredSignal, { waitId: wait.id, event });
      return true;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return false;
      throw err;
    }
  }

  /**
   * The worker's sweep: forgets events older than the longest lookback, and closes the waits of
   * runs that ended without closing them (terminated in the Temporal Web UI, say).
   */
  async sweep(): Promise<void> {
    await this.store.purgeEvents(MAX_LOOKBACK_MS);
    await this.store.closeOrphaned();
  }
}
