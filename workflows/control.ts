// The graph run's bookkeeping activities, as every node module of it calls them. Workflow code.
import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { ControlActivities } from '../activities/index.js';
import { CODE } from './error-codes.js';

export const control = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: [CODE.not_found, CODE.validation_failed] },
});
/** Bookkeeping as local activities: no task round trip through the server for each. */
export const localControl = proxyLocalActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20 },
});
