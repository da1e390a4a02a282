import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { LICENSE_WEBHOOK_WORKFLOW, type LicenseWebhookInput } from '../../workflows/defs.js';
import type { Config } from '../config.js';
import { toIso } from '../db/sql.js';
import { randomToken, type KeyRing } from '../platform/crypto.js';
import { notFound } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import type { TemporalHandle } from '../temporal/connection.js';
import type { LicenseEvent } from './license-webhooks.schemas.js';
import type { LicenseWebhookStore, WebhookRow } from './license-webhook.store.js';

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

/** Vendor webhooks on licence events: their management, their deliveries, starting delivery workflows. */
export class LicenseWebhookService {
  constructor(
    private readonly store: LicenseWebhookStore,
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
    const row = await this.store.insert({
      url: input.url,
      events: input.events,
      description: input.description ?? null,
      active: input.active,
      secretSealed: this.keys.encrypt(secret),
      secretHint: secret.slice(-4),
    });
    return { ...webhookView(row), secret };
  }

  async list(filter: { page: number; per_page: number }): Promise<Page<WebhookView>> {
    const { rows, total } = await this.store.page(filter.page, filter.per_page);
    return { items: rows.map(webhookView), total, page: filter.page, per_page: filter.per_page };
  }

  async get(id: number): Promise<WebhookView> {
    const row = await this.store.get(id);
    if (!row) throw notFound('Licence webhook');
    return webhookView(row);
  }

  async update(
    id: number,
    changes: { url?: string | undefined; events?: LicenseEvent[] | undefined; description?: string | null | undefined; active?: boolean | undefined },
  ): Promise<WebhookView> {
    const row = await this.store.update(id, changes);
    if (!row) throw notFound('Licence webhook');
    return webhookView(row);
  }

  /** Deletes the webhook with its deliveries; delivery workflows still running find nothing and stop. */
  async delete(id: number): Promise<{ id: number; deleted: true }> {
    if (!(await this.store.delete(id))) throw notFound('Licence webhook');
    return { id, deleted: true };
  }

  async deliveries(webhookId: number, filter: { status?: DeliveryView['status'] | undefined; page: number; per_page: number }): Promise<Page<DeliveryView>> {
    await this.get(webhookId);
    const { rows, total, attempts } = await this.store.deliveries(webhookId, filter);
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
    const ids = await this.store.undispatched(olderThanMs);
    await this.start(ids);
    return ids.length;
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
      await this.store.markDispatched(id);
    }
  }
}
