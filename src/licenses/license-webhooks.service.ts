import { randomBytes } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { LICENSE_WEBHOOK_WORKFLOW, type LicenseWebhookInput } from '../../workflows/defs.js';
import type { Config } from '../config.js';
import { toIso, type Sql } from '../db/sql.js';
import { randomToken, type KeyRing } from '../platform/crypto.js';
import { notFound } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import type { TemporalHandle } from '../temporal/connection.js';
import type { LicenseEvent } from './license-webhooks.schemas.js';

export interface WebhookView {
  id: number;
  url: string;
  events: LicenseEvent[];
  description: string | null;
  active: boolean;
  secret_hint: string;
  created_at: string;
  updated_at: string;
}

export interface AttemptView {
  attempt: number;
  started_at: string;
  duration_ms: number;
  response_status: number | null;
  error: string | null;
}

export interface DeliveryView {
  id: string;
  event_id: string;
  event: LicenseEvent;
  status: 'pending' | 'delivered' | 'failed';
  attempt_count: number;
  last_status: number | null;
  last_error: string | null;
  created_at: string;
  finished_at: string | null;
  payload: Record<string, unknown>;
  attempts: AttemptView[];
}

interface Page<T> {
  items: T[];
  total: number;
  page: number;
  per_page: number;
}

/** A subscription as stored: the view's fields, with the timestamps the driver returns. */
type WebhookRow = Omit<WebhookView, 'created_at' | 'updated_at'> & { created_at: Date | string; updated_at: Date | string };

const webhookColumns = 'id, url, events, description, active, secret_hint, created_at, updated_at';

const webhookView = (row: WebhookRow): WebhookView => ({
  id: row.id,
  url: row.url,
  events: row.events,
  description: row.description,
  active: row.active,
  secret_hint: row.secret_hint,
  created_at: toIso(row.created_at)!,
  updated_at: toIso(row.updated_at)!,
});

const randomHex = (bytes: number) => randomBytes(bytes).toString('hex');

/**
 * Writes an event's deliveries, one per active webhook subscribed to it, inside the caller's
 * transaction (the outbox: a committed licence change always has its deliveries, a rolled-back
 * one none). Returns the delivery ids to dispatch once the transaction has committed.
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

/** Vendor webhooks on licence events: their management, their deliveries, starting delivery workflows. */
export class LicenseWebhookService {
  constructor(
    private readonly sql: Sql,
    private readonly keys: KeyRing,
    private readonly temporal: TemporalHandle,
    private readonly config: Config,
    private readonly logger: Logger,
  ) {}

  async create(input: {
    url: string;
    events: LicenseEvent[];
    description?: string | null | undefined;
    active: boolean;
  }): Promise<WebhookView & { secret: string }> {
    // Shown once, like an application password; stored sealed because signing needs the value.
    const secret = `whsec_${randomToken(24)}`;
    const [row] = await this.sql.query<WebhookRow>(
      `insert into license_webhooks (url, events, description, active, secret_sealed, secret_hint) values (?, ?, ?, ?, ?, ?) returning ${webhookColumns}`,
      [input.url, input.events, input.description ?? null, input.active, this.keys.encrypt(secret), secret.slice(-4)],
    );
    return { ...webhookView(row!), secret };
  }

  /** A total for a page past the end, which no row carries. */
  private async count(text: string, params: unknown[]): Promise<number> {
    const [row] = await this.sql.query<{ total: string }>(text, params);
    return Number(row!.total);
  }

  async list(filter: { page: number; per_page: number }): Promise<Page<WebhookView>> {
    // The page and the total come from one statement (one snapshot), so they always agree.
    const rows = await this.sql.query<WebhookRow & { total: string }>(
      `select ${webhookColumns}, count(*) over () as total from license_webhooks order by id desc limit ? offset ?`,
      [filter.per_page, (filter.page - 1) * filter.per_page],
    );
    const total = rows.length ? Number(rows[0]!.total) : await this.count('select count(*) as total from license_webhooks', []);
    return { items: rows.map(webhookView), total, page: filter.page, per_page: filter.per_page };
  }

  async get(id: number): Promise<WebhookView> {
    const [row] = await this.sql.query<WebhookRow>(`select ${webhookColumns} from license_webhooks where id = ?`, [id]);
    if (!row) throw notFound('Licence webhook');
    return webhookView(row);
  }

  async update(
    id: number,
    changes: { url?: string | undefined; events?: LicenseEvent[] | undefined; description?: string | null | undefined; active?: boolean | undefined },
  ): Promise<WebhookView> {
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
    if (!row) throw notFound('Licence webhook');
    return webhookView(row);
  }

  /** Deletes the webhook with its deliveries; delivery workflows still running find nothing and stop. */
  async delete(id: number): Promise<{ id: number; deleted: true }> {
    const rows = await this.sql.query('delete from license_webhooks where id = ? returning id', [id]);
    if (!rows.length) throw notFound('Licence webhook');
    return { id, deleted: true };
  }

  async deliveries(webhookId: number, filter: { status?: DeliveryView['status'] | undefined; page: number; per_page: number }): Promise<Page<DeliveryView>> {
    await this.get(webhookId);
    const where = `webhook_id = ?${filter.status ? ' and status = ?' : ''}`;
    const params: unknown[] = [webhookId, ...(filter.status ? [filter.status] : [])];
    // The page and the total come from one statement (one snapshot): a delivery that changes status
    // meanwhile is counted and listed alike.
    const rows = await this.sql.query<{
      id: string;
      event_id: string;
      event: LicenseEvent;
      status: DeliveryView['status'];
      attempts: number;
      last_status: number | null;
      last_error: string | null;
      created_at: Date | string;
      finished_at: Date | string | null;
      payload: Record<string, unknown>;
      total: string;
    }>(
      `select id, event_id, event, status, attempts, last_status, last_error, created_at, finished_at, payload, count(*) over () as total
           from license_webhook_deliveries where ${where} order by created_at desc, id limit ? offset ?`,
      [...params, filter.per_page, (filter.page - 1) * filter.per_page],
    );
    const total = rows.length ? Number(rows[0]!.total) : await this.count(`select count(*) as total from license_webhook_deliveries where ${where}`, params);
    const attempts = rows.length
      ? await this.sql.query<{
          delivery_id: string;
          attempt: number;
          started_at: Date | string;
          duration_ms: number;
          response_status: number | null;
          error: string | null;
        }>(
          'select delivery_id, attempt, started_at, duration_ms, response_status, error from license_webhook_attempts where delivery_id = any(?) order by attempt',
          [rows.map((r) => r.id)],
        )
      : [];
    return {
      items: rows.map((r) => ({
        id: r.id,
        event_id: r.event_id,
        event: r.event,
        status: r.status,
        attempt_count: r.attempts,
        last_status: r.last_status,
        last_error: r.last_error,
        created_at: toIso(r.created_at)!,
        finished_at: toIso(r.finished_at),
        payload: r.payload,
        attempts: attempts
          .filter((a) => a.delivery_id === r.id)
          .map((a) => ({
            attempt: a.attempt,
            started_at: toIso(a.started_at)!,
            duration_ms: a.duration_ms,
            response_status: a.response_status,
            error: a.error,
          })),
      })),
      total,
      page: filter.page,
      per_page: filter.per_page,
    };
  }

  workflowId(deliveryId: string): string {
    return `${this.config.SVC_INSTANCE_ID}-license-webhook-${deliveryId}`;
  }

  /**
   * Starts the delivery workflows of committed deliveries, without waiting: the licence answer
   * does not depend on Temporal. What fails here (Temporal down) the sweep starts later.
   */
  dispatch(deliveryIds: string[]): void {
    if (!deliveryIds.length) return;
    this.start(deliveryIds).catch((err: unknown) =>
      this.logger.warn({ err, deliveries: deliveryIds }, 'licence webhook deliveries not started yet; the sweep retries'),
    );
  }

  /** Starts deliveries nobody started (a crash after commit, Temporal down, a CLI change). */
  async sweep(olderThanMs = 10_000): Promise<number> {
    const rows = await this.sql.query<{ id: string }>(
      `select id from license_webhook_deliveries where dispatched_at is null and created_at < now() - make_interval(secs => ?) order by created_at limit 200`,
      [olderThanMs / 1000],
    );
    await this.start(rows.map((r) => r.id));
    return rows.length;
  }

  private async start(deliveryIds: string[]): Promise<void> {
    const input = (deliveryId: string): LicenseWebhookInput => ({
      deliveryId,
      maxAttempts: this.config.SVC_LICENSE_WEBHOOK_MAX_ATTEMPTS,
      retryMs: this.config.SVC_LICENSE_WEBHOOK_RETRY_MS,
      timeoutMs: this.config.SVC_LICENSE_WEBHOOK_TIMEOUT_MS,
    });
    for (const id of deliveryIds) {
      try {
        await this.temporal.client.workflow.start(LICENSE_WEBHOOK_WORKFLOW, {
          taskQueue: this.temporal.taskQueue,
          workflowId: this.workflowId(id),
          args: [input(id)],
          // The id is the delivery's: starting it again, even after it finished, does nothing.
          workflowIdReusePolicy: 'REJECT_DUPLICATE',
        });
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      }
      await this.sql.query('update license_webhook_deliveries set dispatched_at = now() where id = ? and dispatched_at is null', [id]);
    }
  }
}
