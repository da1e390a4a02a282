import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { LicenseWebhookActivities } from '../activities/index.js';
import { LICENSE_WEBHOOK_FINAL_ERRORS, type LicenseWebhookInput, type LicenseWebhookResult } from './defs.js';
import { CODE } from './error-codes.js';

const bookkeeping = proxyActivities<LicenseWebhookActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '1s', maximumAttempts: 20, nonRetryableErrorTypes: [CODE.not_found] },
});

/**
 * Delivers one licence event to one webhook. The retries are the send activity's own retry
 * policy (exponential backoff from `retryMs`, at most 6 hours apart), so a worker restart between
 * attempts loses nothing and Temporal's history shows every attempt. When the attempts run out,
 * the delivery is recorded as failed.
 */
export async function deliverLicenseWebhook(input: LicenseWebhookInput): Promise<LicenseWebhookResult> {
  const sender = proxyActivities<LicenseWebhookActivities>({
    // The request's own timeout plus time for the bookkeeping around it.
    startToCloseTimeout: input.timeoutMs + 10_000,
    retry: {
      initialInterval: input.retryMs,
      backoffCoefficient: 2,
      maximumInterval: '6h',
      maximumAttempts: input.maxAttempts,
      nonRetryableErrorTypes: [...LICENSE_WEBHOOK_FINAL_ERRORS],
    },
  });
  try {
    const sent = await sender.sendLicenseWebhook({ deliveryId: input.deliveryId });
    return { deliveryId: input.deliveryId, status: sent.status, attempts: sent.attempts };
  } catch (err) {
    if (!(err instanceof ActivityFailure)) throw err;
    const cause = err.cause;
    // The webhook or the delivery was deleted: nothing left to record.
    if (cause instanceof ApplicationFailure && cause.type === 'not_found') return { deliveryId: input.deliveryId, status: 'failed', attempts: 0 };
    const failed = await bookkeeping.failLicenseWebhookDelivery({ deliveryId: input.deliveryId, error: cause?.message ?? err.message });
    return { deliveryId: input.deliveryId, status: 'failed', attempts: failed.attempts };
  }
}
