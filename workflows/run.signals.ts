import { defineSignal } from '@temporalio/workflow';
import type { ApprovalDecided, EventDelivery } from './defs.js';

// The signals a graph run waits for, declared once here and shared by the workflow modules that
// wait (wait-for-event.ts, approval.ts) and the API that sends them (which imports only this file
// and defs.ts, never a workflow implementation). Signals, not updates: the sender's answer does
// not depend on the run, the stored state says what was delivered or decided, and Temporal keeps
// a signal sent while no worker runs.

/** An event reached a wait of the run (sent under the wait's lock, once the wait row says received). */
export const eventDeliveredSignal = defineSignal<[EventDelivery]>('eventDelivered');
/** An approval of the run reached its final decision; the run reads which from the stored action. */
export const approvalDecidedSignal = defineSignal<[ApprovalDecided]>('approvalDecided');
