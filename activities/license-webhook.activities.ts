import { createHmac } from 'node:crypto';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Config } from '../src/config.js';
import type { LicenseWebhookStore } from '../src/licenses/license-webhook.store.js';
import type { KeyRing } from '../src/platform/crypto.js';
import { CODE } from '../workflows/error-codes.js';
import { EgressDeniedError, type EgressPolicy } from '../src/platform/egress.js';

/** Stripe's scheme: HMAC-SHA256 of `<unix time>.<body>` under the webhook's secret. */
export function webhookSignature(secret: string, timestamp: number, body: string): string {
  return `t=${timestamp},v1=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

const MAX_ERROR_LENGTH = 500;

/**
 * Activities of licence webhook delivery. The webhook's secret is decrypted here and nowhere
 * else: it is never an activity argument or result, so Temporal's history never holds it.
 */
export function licenseWebhookActivities(services: {
  stores: { licenseWebhooks: Pick<LicenseWebhookStore, 'recordAttempt' | 'forSending' | 'markDelivered' | 'markFailed'> };
  keys: KeyRing;
  egress: Pick<EgressPolicy, 'fetch'>;
  config: Pick<Config, 'SVC_LICENSE_WEBHOOK_TIMEOUT_MS'>;
}) {
  const { keys, config, egress } = services;
  const licenseWebhookStore = services.stores.licenseWebhooks;

  async function recordAttempt(deliveryId: string, attempt: number, started: number, status: number | null, error: string | null) {
    await licenseWebhookStore.recordAttempt(deliveryId, attempt, started, status, error === null ? null : error.slice(0, MAX_ERROR_LENGTH));
  }

  return {
    /** One attempt: POST the event, signed; a non-2xx answer or no answer fails the attempt (Temporal retries). */
    async sendLicenseWebhook(input: { deliveryId: string }): Promise<{ status: 'delivered'; attempts: number }> {
      const attempt = Context.current().info.attempt;
      const row = await licenseWebhookStore.forSending(input.deliveryId);
      if (!row) throw ApplicationFailure.nonRetryable('The delivery or its webhook no longer exists', CODE.not_found);
      // A retry of an attempt that got through before the worker died.
      if (row.status === 'delivered') return { status: 'delivered', attempts: row.attempts };
      if (!row.active) throw ApplicationFailure.nonRetryable('The webhook is inactive', CODE.webhook_inactive);
      // jsonb gives the payload back the same way on every attempt, so each attempt sends the same bytes.
      const body = JSON.stringify(row.payload);
      const started = Date.now();
      const timestamp = Math.floor(started / 1000);
      let status: number;
      try {
        // Within the egress policy; a redirect is answered as it is (an attempt that failed), never followed.
        const response = await egress.fetch(
          new URL(row.url),
          {
            method: 'POST',
            headers: {
              'content-type': 'application/json',
              'user-agent': 'workflow-svc-webhooks/1',
              'svc-event': row.event,
              'svc-event-id': row.event_id,
              'svc-delivery': input.deliveryId,
              'svc-signature': webhookSignature(keys.decrypt(row.secret_sealed), timestamp, body),
            },
            body,
            signal: AbortSignal.timeout(config.SVC_LICENSE_WEBHOOK_TIMEOUT_MS),
          },
          { maxRedirects: 0 },
        );
        status = response.status;
        await response.body?.cancel().catch(() => undefined);
      } catch (err) {
        if (err instanceof EgressDeniedError) {
          await recordAttempt(input.deliveryId, attempt, started, null, err.message);
          // The same address is refused on every attempt: the delivery fails now.
          throw ApplicationFailure.nonRetryable(err.message, CODE.egress_denied);
        }
        const message = err instanceof Error ? (err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message) : String(err);
        await recordAttempt(input.deliveryId, attempt, started, null, message);
        throw ApplicationFailure.retryable(`The webhook could not be reached: ${message}`, CODE.webhook_unreachable);
      }
      if (status < 200 || status >= 300) {
        await recordAttempt(input.deliveryId, attempt, started, status, `answered ${status}`);
        throw ApplicationFailure.retryable(`The webhook answered ${status}`, CODE.webhook_http_error);
      }
      await recordAttempt(input.deliveryId, attempt, started, status, null);
      await licenseWebhookStore.markDelivered(input.deliveryId);
      return { status: 'delivered', attempts: attempt };
    },

    /** The attempts ran out (or the webhook was switched off): the delivery is recorded as failed. */
    async failLicenseWebhookDelivery(input: { deliveryId: string; error: string }): Promise<{ attempts: number }> {
      return { attempts: await licenseWebhookStore.markFailed(input.deliveryId, input.error.slice(0, MAX_ERROR_LENGTH)) };
    },
  };
}
