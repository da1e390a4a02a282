import { createHmac } from 'node:crypto';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Config } from '../src/config.js';
import type { LicenseWebhookStore } from '../src/licenses/license-webhook.store.js';
import type { KeyRing } from '../src/platform/crypto.js';
import { EgressDeniedError, type EgressPolicy } from '../src/platform/egress.js';
import { CODE } from '../workflows/error-codes.js';

/** Stripe's scheme: HMAC-SHA256 of `<unix time>.<body>` under the webhook's secret. */
export function webhookSignature(secret: string, timestamp: number, body: string): string {
  return `t=${timestamp},v1=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

const MAX_ERROR_LENGTH = 500;

/** An error as an attempt's record shows it: the message, and its cause's. */
export function unreachableMessage(err: unknown): string {
  return err instanceof Error ? (err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message) : String(err);
}

/** What the delivery activities use. */
export interface LicenseWebhookPorts {
  stores: { licenseWebhooks: Pick<LicenseWebhookStore, 'recordAttempt' | 'forSending' | 'markDelivered' | 'markFailed'> };
  keys: KeyRing;
  egress: Pick<EgressPolicy, 'fetch'>;
  config: Pick<Config, 'SVC_LICENSE_WEBHOOK_TIMEOUT_MS'>;
}

/** A delivery ready to send, as the store reads it. */
type Sending = NonNullable<Awaited<ReturnType<LicenseWebhookStore['forSending']>>>;

/**
 * Activities of licence webhook delivery. The webhook's secret is decrypted here and nowhere
 * else: it is never an activity argument or result, so Temporal's history never holds it.
 */
export function licenseWebhookActivities(services: LicenseWebhookPorts) {
  return {
    sendLicenseWebhook: (input: { deliveryId: string }) => sendLicenseWebhook(services, input),
    failLicenseWebhookDelivery: (input: { deliveryId: string; error: string }) => failLicenseWebhookDelivery(services, input),
  };
}

/** One attempt: POST the event, signed; a non-2xx answer or no answer fails the attempt (Temporal retries). */
export async function sendLicenseWebhook(ports: LicenseWebhookPorts, input: { deliveryId: string }): Promise<{ status: 'delivered'; attempts: number }> {
  const store = ports.stores.licenseWebhooks;
  const attempt = Context.current().info.attempt;
  const row = await store.forSending(input.deliveryId);
  if (!row) throw ApplicationFailure.nonRetryable('The delivery or its webhook no longer exists', CODE.not_found);
  // A retry of an attempt that got through before the worker died.
  if (row.status === 'delivered') return { status: 'delivered', attempts: row.attempts };
  if (!row.active) throw ApplicationFailure.nonRetryable('The webhook is inactive', CODE.webhook_inactive);
  const started = Date.now();
  const record = (status: number | null, error: string | null) =>
    store.recordAttempt(input.deliveryId, attempt, started, status, error === null ? null : error.slice(0, MAX_ERROR_LENGTH));
  let status: number;
  try {
    status = await postDelivery(ports, input.deliveryId, row, started);
  } catch (err) {
    if (err instanceof EgressDeniedError) {
      await record(null, err.message);
      // The same address is refused on every attempt: the delivery fails now.
      throw ApplicationFailure.nonRetryable(err.message, CODE.egress_denied);
    }
    const message = unreachableMessage(err);
    await record(null, message);
    throw ApplicationFailure.retryable(`The webhook could not be reached: ${message}`, CODE.webhook_unreachable);
  }
  if (status < 200 || status >= 300) {
    await record(status, `answered ${status}`);
    throw ApplicationFailure.retryable(`The webhook answered ${status}`, CODE.webhook_http_error);
  }
  await record(status, null);
  await store.markDelivered(input.deliveryId);
  return { status: 'delivered', attempts: attempt };
}

/**
 * POSTs the delivery's event, signed with the webhook's secret, within the egress policy; a
 * redirect is answered as it is (an attempt that failed), never followed. Answers the status.
 */
async function postDelivery(ports: LicenseWebhookPorts, deliveryId: string, row: Sending, started: number): Promise<number> {
  // jsonb gives the payload back the same way on every attempt, so each attempt sends the same bytes.
  const body = JSON.stringify(row.payload);
  const timestamp = Math.floor(started / 1000);
  const response = await ports.egress.fetch(
    new URL(row.url),
    {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'user-agent': 'workflow-svc-webhooks/1',
        'svc-event': row.event,
        'svc-event-id': row.event_id,
        'svc-delivery': deliveryId,
        'svc-signature': webhookSignature(ports.keys.decrypt(row.secret_sealed), timestamp, body),
      },
      body,
      signal: AbortSignal.timeout(ports.config.SVC_LICENSE_WEBHOOK_TIMEOUT_MS),
    },
    { maxRedirects: 0 },
  );
  await response.body?.cancel().catch(() => undefined);
  return response.status;
}

/** The attempts ran out (or the webhook was switched off): the delivery is recorded as failed. */
export async function failLicenseWebhookDelivery(
  ports: Pick<LicenseWebhookPorts, 'stores'>,
  input: { deliveryId: string; error: string },
): Promise<{ attempts: number }> {
  return { attempts: await ports.stores.licenseWebhooks.markFailed(input.deliveryId, input.error.slice(0, MAX_ERROR_LENGTH)) };
}
