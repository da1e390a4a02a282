import type { Queryable, Sql } from '../db/sql.js';
import { toIso } from '../db/sql.js';
import type { ReceivedEvent } from '../../workflows/defs.js';

/**
 * The one owner of `workflow_events` (what was sent, kept for the longest lookback) and
 * `workflow_event_waits` (the waits of runs). An event and a wait meet under one transaction-level
 * advisory lock on their name and key, whichever comes first:
 *
 *     event sent ──lock──▶ stored, then every waiting wait it may reach ──▶ received (its run signalled)
 *     wait begun ──lock──▶ registered, then the oldest event within its lookback ──▶ received at once
 *
 * so an event sent a moment before the wait begins is found by the wait, and one sent a moment
 * after finds the wait. A wait row changes once, from `waiting`: to `received` (by a delivery, or
 * by the run that got the signal), `timed_out` (the run's timer fired first; a delivery holding
 * the row wins) or `cancelled` (the run was cancelled, or is gone).
 */

export type WaitStatus = 'waiting' | 'received' | 'timed_out' | 'cancelled';

/** A wait an event reaches: its run, to signal. */
export interface ReachedWait {
  id: string;
  execution_id: string;
  temporal_workflow_id: string;
  temporal_run_id: string;
}

/** An event as stored. */
interface EventRow {
  id: string;
  name: string;
  key: string;
  data: unknown;
  sent_at: Date | string;
  delivered_to: string[];
}

/**
 * Whether every one of the senders (`senders`, SQL for an int[]) may see the workflow `wf`: its
 * owner, someone it is shared with, or an administrator. A sender who no longer exists sees nothing.
 */
const visibleToSenders = (senders: string) => `not exists (select 1 from unnest(${senders}) s(id) left join users u on u.id = s.id
   where u.id is null or not (u.role = 'administrator' or u.id = wf.owner_id or u.id = any(wf.shared_with)))`;

const lockOn = (q: Queryable, name: string, key: string) => q.query('select pg_advisory_xact_lock(hashtext(?), hashtext(?))', [`event:${name}`, key]);

const received = (row: EventRow, receivedAt: Date | string): ReceivedEvent => ({
  name: row.name,
  key: row.key,
  data: row.data,
  sent_at: toIso(row.sent_at)!,
  received_at: toIso(receivedAt)!,
});

export class EventStore {
  constructor(private readonly sql: Sql) {}

  /**
   * Registers a run's wait (idempotent on its run and node: a retried step finds its wait and
   * what it took) and takes the oldest event sent within `lookbackMs` before now that the senders
   * may reach this run with and that no wait of the run's lineage took (an earlier wait of the
   * same run, of the run a reset came from, of an execution this one replays).
   */
  async registerWait(wait: {
    executionId: number;
    workflowId: number;
    nodeId: string;
    temporalWorkflowId: string;
    runId: string;
    name: string;
    key: string;
    lookbackMs: number;
  }): Promise<{ waitId: string; status: WaitStatus; event?: ReceivedEvent }> {
    return this.sql.transaction(async (tx) => {
      await lockOn(tx, wait.name, wait.key);
      await tx.query(
        `insert into workflow_event_waits (execution_id, workflow_id, node_id, temporal_workflow_id, temporal_run_id, name, key)
         values (?, ?, ?, ?, ?, ?, ?) on conflict (temporal_run_id, node_id) do nothing`,
        [wait.executionId, wait.workflowId, wait.nodeId, wait.temporalWorkflowId, wait.runId, wait.name, wait.key],
      );
      const [row] = await tx.query<{ id: string; status: WaitStatus; event: ReceivedEvent | null }>(
        'select id, status, event from workflow_event_waits where temporal_run_id = ? and node_id = ?',
        [wait.runId, wait.nodeId],
      );
      if (row!.status !== 'waiting') return { waitId: row!.id, status: row!.status, ...(row!.event ? { event: row!.event } : {}) };
      // Not an event this run's lineage took already: the same Temporal workflow (a reset run) or
      // an execution it replays (a replay with a new payload), however far back.
      const [found] = await tx.query<EventRow & { now: Date | string }>(
        `with recursive lineage(id) as (
           select ?::bigint union select x.replay_of from executions x join lineage l on x.id = l.id where x.replay_of is not null)
         select e.id, e.name, e.key, e.data, e.sent_at, e.delivered_to, clock_timestamp() as now from workflow_events e, workflows wf
          where wf.id = ? and e.name = ? and e.key = ? and e.sent_at >= clock_timestamp() - (? * interval '1 millisecond')
            and not exists (select 1 from workflow_event_waits p
                             where p.event_id = e.id and (p.temporal_workflow_id = ? or p.execution_id in (select id from lineage)))
            and ${visibleToSenders('e.sender_ids')}
          order by e.sent_at, e.id limit 1`,
        [wait.executionId, wait.workflowId, wait.name, wait.key, wait.lookbackMs, wait.temporalWorkflowId],
      );
      if (!found) return { waitId: row!.id, status: 'waiting' };
      const event = received(found, found.now);
      await this.markReceived(tx, row!.id, found.id, event);
      await tx.query('update workflow_events set delivered_to = array_append(delivered_to, ?::bigint) where id = ?', [wait.executionId, found.id]);
      return { waitId: row!.id, status: 'received', event };
    });
  }

  private async markReceived(q: Queryable, waitId: string, eventId: string | null, event: ReceivedEvent): Promise<void> {
    await q.query(`update workflow_event_waits set status = 'received', event_id = ?, event = ?, resolved_at = now() where id = ?`, [
      eventId,
      JSON.stringify(event),
      waitId,
    ]);
  }

  /**
   * Stores an event and delivers it to every waiting wait of a running execution whose workflow
   * all `senderIds` may see: each is marked received and `signal` tells its run, inside the
   * transaction, so a failed signal (Temporal unreachable) undoes the whole sending and a stored
   * delivery has always been signalled. `signal` answers false for a run that is gone: its wait
   * is closed. With an `origin` (an emit_event node's), a second sending answers the first.
   */
  async send(
    event: { name: string; key: string; data: unknown; senderIds: number[]; origin?: string },
    signal: (wait: ReachedWait, event: ReceivedEvent) => Promise<boolean>,
  ): Promise<{ eventId: number; delivered: number[]; repeated: boolean }> {
    return this.sql.transaction(async (tx) => {
      const [inserted] = await tx.query<EventRow>(
        `insert into workflow_events (name, key, data, sender_ids, origin) values (?, ?, ?, ?, ?) on conflict (origin) do nothing
         returning id, name, key, data, sent_at, delivered_to`,
        [event.name, event.key, JSON.stringify(event.data ?? null), event.senderIds, event.origin ?? null],
      );
      if (!inserted) {
        const [first] = await tx.query<{ id: string; delivered_to: string[] }>('select id, delivered_to from workflow_events where origin = ?', [event.origin]);
        return { eventId: Number(first!.id), delivered: first!.delivered_to.map(Number), repeated: true };
      }
      await lockOn(tx, event.name, event.key);
      const waits = await tx.query<ReachedWait>(
        `select w.id, w.execution_id, w.temporal_workflow_id, w.temporal_run_id from workflow_event_waits w
           join executions x on x.id = w.execution_id and x.status = 'running'
           join workflows wf on wf.id = w.workflow_id
          where w.name = ? and w.key = ? and w.status = 'waiting' and ${visibleToSenders('?::int[]')}
          order by w.created_at, w.id for update of w`,
        [event.name, event.key, event.senderIds],
      );
      const delivered: number[] = [];
      const [{ now }] = (await tx.query<{ now: Date | string }>('select now() as now')) as [{ now: Date | string }];
      const payload = received(inserted, now);
      for (const wait of waits) {
        await this.markReceived(tx, wait.id, inserted.id, payload);
        if (await signal(wait, payload)) delivered.push(Number(wait.execution_id));
        else await tx.query(`update workflow_event_waits set status = 'cancelled', event_id = null, event = null where id = ?`, [wait.id]);
      }
      if (delivered.length) await tx.query('update workflow_events set delivered_to = ? where id = ?', [delivered, inserted.id]);
      return { eventId: Number(inserted.id), delivered, repeated: false };
    });
  }

  /**
   * Ends a wait as its run saw it: with the event a signal brought (stored, if the delivery's own
   * transaction did not keep it), or timed out, unless a delivery holding the row stored an event
   * first: then that event is the outcome. Answers the wait's final state.
   */
  async endWait(waitId: string, event: ReceivedEvent | undefined): Promise<{ status: WaitStatus; event?: ReceivedEvent; created_at: Date | string }> {
    if (event) {
      await this.sql.query(`update workflow_event_waits set status = 'received', event = ?, resolved_at = now() where id = ? and status = 'waiting'`, [
        JSON.stringify(event),
        waitId,
      ]);
    } else {
      await this.sql.query(`update workflow_event_waits set status = 'timed_out', resolved_at = now() where id = ? and status = 'waiting'`, [waitId]);
    }
    const [row] = await this.sql.query<{ status: WaitStatus; event: ReceivedEvent | null; created_at: Date | string }>(
      'select status, event, created_at from workflow_event_waits where id = ?',
      [waitId],
    );
    if (!row) return { status: event ? 'received' : 'timed_out', ...(event ? { event } : {}), created_at: new Date() };
    // A signal's event is the run's outcome even if the wait was closed meanwhile (its run went away and came back).
    const outcome = event ?? row.event ?? undefined;
    return { status: outcome ? 'received' : row.status, ...(outcome ? { event: outcome } : {}), created_at: row.created_at };
  }

  /** The run was cancelled: its wait no longer takes events. */
  async closeWait(waitId: string): Promise<void> {
    await this.sql.query(`update workflow_event_waits set status = 'cancelled', resolved_at = now() where id = ? and status = 'waiting'`, [waitId]);
  }

  /** Closes the waits whose run ended without closing them (terminated or reset in Temporal); answers how many. */
  async closeOrphaned(): Promise<number> {
    const rows = await this.sql.query(
      `update workflow_event_waits w set status = 'cancelled', resolved_at = now()
        where w.status = 'waiting' and exists (select 1 from executions x where x.id = w.execution_id and x.status <> 'running') returning 1`,
    );
    return rows.length;
  }

  /** Runs waiting for an event right now (a metric). */
  async countWaiting(): Promise<number> {
    const [row] = await this.sql.query<{ n: number }>(
      `select count(distinct w.execution_id)::int as n from workflow_event_waits w join executions x on x.id = w.execution_id
        where w.status = 'waiting' and x.status = 'running'`,
    );
    return row!.n;
  }

  /** Forgets events sent longer ago than the longest lookback; answers how many. */
  async purgeEvents(olderThanMs: number): Promise<number> {
    const rows = await this.sql.query(`delete from workflow_events where sent_at < now() - (? * interval '1 millisecond') returning 1`, [olderThanMs]);
    return rows.length;
  }
}
