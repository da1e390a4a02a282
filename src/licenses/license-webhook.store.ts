import { randomBytes } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Queryable } from '../db/sql.js';
import type { LicenseEvent } from './license-webhooks.schemas.js';

/** A subscription as stored, with the timestamps the driver returns. */
export interface WebhookRow {
  id: number;
  url: string;
  events: LicenseEvent[];
  description: string | null;
  active: boolean;
  secret_hint: string;
  created_at: Date | string;
  updated_at: Date | string;
}

export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

export interface DeliveryRow {
  id: string;
  event_id: string;
  event: LicenseEvent;
  status: DeliveryStatus;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  created_at: Date | string;
  finished_at: Date | string | null;
  payload: Record<string, unknown>;
}

export interface AttemptRow {
  delivery_id: string;
  attempt: number;
  started_at: Date | string;
  duration_ms: number;
  response_status: number | null;
  error: string | null;
}

const webhookColumns = 'id, url, events, description, active, secret_hint, created_at, updated_at';

const randomHex = (bytes: number) => randomBytes(bytes).toString('hex');

/**
 * Writes an event's deliveries, one per active webhook subscribed to it, inside the caller's
 * transaction (the outbox: a committed licence change always has its deliveries, a rolled-back
 * one none). The caller's transaction is MikroORM's (licences are entities), so the statement
 * runs on its entity manager. Returns the delivery ids to dispatch once it has committed.
 */
export async function enqueueLicenseEvent(em: EntityManager, type: LicenseEvent, data: Record<string, unknown>): Promise<string[]> {
  const event = { id: `evt_${randomHex(12)}`, type, created_at: new Date().toISOString(), data };
  const rows = await em.execute<{ id: string }[]>(
    `insert into license_webhook_deliveries (id, webhook_id, event_id, event, payload, status)
     select 'whd_' || replace(gen_random_uuid()::text, '-', ''), w.id, ?, ?, ?::jsonb, 'pending'
       from license_webhooks w where w.active and ? = any(w.events)
     returning id`,
    [event.id, type, JSON.stringify(event), type],
  );
  return rows.map((r) => r.id);
}

/**
 * The one owner of `license_webhooks`, `license_webhook_deliveries` and `license_webhook_attempts`:
 * vendors' subscriptions, the outbox of licence events, and each delivery's attempts. Nothing else
 * in the service writes these tables.
 */
export class LicenseWebhookStore {
  constructor(private readonly sql: Queryable) {}

  async insert(input: { url: string; events: LicenseEvent[]; description: string | null; active: boolean; secretSealed: string; secretHint: string }) {
    const [row] = await this.sql.query<WebhookRow>(
      `insert into license_webhooks (url, events, description, active, secret_sealed, secret_hint) values (?, ?, ?, ?, ?, ?) returning ${webhookColumns}`,
      [input.url, input.events, input.description, input.active, input.secretSealed, input.secretHint],
    );
    return row!;
  }

  /**
   * One page of `from` (a table and its condition, `params` filling the condition's placeholders)
   * and the total of its rows, from one statement (one snapshot), so that they always agree: also
   * when the page is empty (past the end, or before a row arrives that a second count would see).
   */
  private async pageOf<T extends { id: unknown }>(
    columns: string,
    from: string,
    params: unknown[],
    order: string,
    page: number,
    perPage: number,
  ): Promise<{ rows: T[]; total: number }> {
    const found = await this.sql.query<T & { total: string }>(
      `select p.*, t.total from (select count(*) as total from ${from}) t
         left join lateral (select ${columns} from ${from} order by ${order} limit ? offset ?) p on true`,
      [...params, ...params, perPage, (page - 1) * perPage],
    );
    const total = Number(found[0]?.total ?? 0);
    const rows = found.filter((r) => r.id !== null).map(({ total: _total, ...row }) => row as unknown as T);
    return { rows, total };
  }

  async page(page: number, perPage: number): Promise<{ rows: WebhookRow[]; total: number }> {
    return this.pageOf<WebhookRow>(webhookColumns, 'license_webhooks', [], 'id desc', page, perPage);
  }

  async get(id: number): Promise<WebhookRow | undefined> {
    const [row] = await this.sql.query<WebhookRow>(`select ${webhookColumns} from license_webhooks where id = ?`, [id]);
    return row;
  }

  async update(
    id: number,
    changes: { url?: string | undefined; events?: LicenseEvent[] | undefined; description?: string | null | undefined; active?: boolean | undefined },
  ): Promise<WebhookRow | undefined> {
    const [row] = await this.sql.query<WebhookRow>(
      `update license_webhooks set
          url = coalesce(?, url),
          events = coalesce(?::text[], events),
          description = case when ? then ? else description end,
          active = coalesce(?, active),
          updated_at = now()
        where id = ? returning ${webhookColumns}`,
      [changes.url ?? null, changes.events ?? null, changes.description !== undefined, changes.description ?? null, changes.active ?? null, id],
    );
    return row;
  }

  /** Deletes the webhook with its deliveries (on delete cascade); false when there was none. */
  async delete(id: number): Promise<boolean> {
    const rows = await this.sql.query('delete from license_webhooks where id = ? returning id', [id]);
    return rows.length > 0;
  }

  /** One page of a webhook's deliveries, newest first, with their attempts. */
  async deliveries(
    webhookId: number,
    filter: { status?: DeliveryStatus | undefined; page: number; per_page: number },
  ): Promise<{ rows: DeliveryRow[]; total: number; attempts: AttemptRow[] }> {
    const where = `webhook_id = ?${filter.status ? ' and status = ?' : ''}`;
    const params: unknown[] = [webhookId, ...(filter.status ? [filter.status] : [])];
    // A delivery that changes status meanwhile is counted and listed alike.
    const { rows, total } = await this.pageOf<DeliveryRow>(
      'id, event_id, event, status, attempts, last_status, last_error, created_at, finished_at, payload',
      `license_webhook_deliveries where ${where}`,
      params,
      'created_at desc, id',
      filter.page,
      filter.per_page,
    );
    const attempts = rows.length
      ? await this.sql.query<AttemptRow>(
          'select delivery_id, attempt, started_at, duration_ms, response_status, error from license_webhook_attempts where delivery_id = any(?) order by attempt',
          [rows.map((r) => r.id)],
        )
      : [];
    return { rows, total, attempts };
  }

  /** Deliveries written where nothing started them (a crash after commit, Temporal down, a CLI change). */
  async undispatched(olderThanMs: number): Promise<string[]> {
    const rows = await this.sql.query<{ id: string }>(
      `select id from license_webhook_deliveries where dispatched_at is null and created_at < now() - make_interval(secs => ?) order by created_at limit 200`,
      [olderThanMs / 1000],
    );
    return rows.map((r) => r.id);
  }

  async markDispatched(id: string): Promise<void> {
    await this.sql.query('update license_webhook_deliveries set dispatched_at = now() where id = ? and dispatched_at is null', [id]);
  }

  /** What one attempt sends: the delivery with its webhook's address and sealed secret. */
  async forSending(deliveryId: string) {
    const [row] = await this.sql.query<{
      status: string;
      attempts: number;
      payload: unknown;
      event: string;
      event_id: string;
      url: string;
      secret_sealed: string;
      active: boolean;
    }>(
      `select d.status, d.attempts, d.payload, d.event, d.event_id, w.url, w.secret_sealed, w.active
           from license_webhook_deliveries d join license_webhooks w on w.id = d.webhook_id where d.id = ?`,
      [deliveryId],
    );
    return row;
  }

  /** One attempt and its answer (idempotent on the attempt number: a retried activity overwrites its own row). */
  async recordAttempt(deliveryId: string, attempt: number, started: number, status: number | null, message: string | null): Promise<void> {
    await this.sql.query(
      `insert into license_webhook_attempts (delivery_id, attempt, started_at, duration_ms, response_status, error) values (?, ?, ?, ?, ?, ?)
       on conflict (delivery_id, attempt) do update set started_at = excluded.started_at, duration_ms = excluded.duration_ms,
         response_status = excluded.response_status, error = excluded.error`,
      [deliveryId, attempt, new Date(started), Date.now() - started, status, message],
    );
    await this.sql.query('update license_webhook_deliveries set attempts = greatest(attempts, ?), last_status = ?, last_error = ? where id = ?', [
      attempt,
      status,
      message,
      deliveryId,
    ]);
  }

  /** pending → delivered. */
  async markDelivered(deliveryId: string): Promise<void> {
    await this.sql.query(`update license_webhook_deliveries set status = 'delivered', finished_at = now() where id = ? and status = 'pending'`, [deliveryId]);
  }

  /** pending → failed; answers the attempts made (0 when it was no longer pending). */
  async markFailed(deliveryId: string, error: string): Promise<number> {
    const rows = await this.sql.query<{ attempts: number }>(
      `update license_webhook_deliveries set status = 'failed', finished_at = now(), last_error = coalesce(last_error, ?)
          where id = ? and status = 'pending' returning attempts`,
      [error, deliveryId],
    );
    return rows[0]?.attempts ?? 0;
  }
}
