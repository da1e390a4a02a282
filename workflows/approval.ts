import { CancellationScope, condition, isCancellation, log, proxyActivities, proxyLocalActivities, setHandler } from '@temporalio/workflow';
import type { ApprovalActivities } from '../activities/index.js';
import type { ApprovalNotice, GraphNode, OpenedApproval, RunNodeInput, RunNodeOutput } from './defs.js';
import { CODE } from './error-codes.js';
import type { NodeAwaits } from './local-gate.js';
import { approvalDecidedSignal } from './run.signals.js';

// An approval node: an action on the gate every approver's inbox shows, decided through the gate's
// endpoints or the approver's page. The stored action is the truth (its transitions are guarded in
// SQL: a decision and the expiry at once, one wins); the signal only wakes the run, which then
// reads the action. Reminders and the escalation are durable timers between the wake-ups. Temporal's
// limits: a timer and an activity per reminder, and reminders stop after `maxReminders`, so a
// long-waiting approval stays a few hundred history events.

const bookkeeping = proxyLocalActivities<ApprovalActivities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '500ms', maximumAttempts: 20, nonRetryableErrorTypes: [CODE.validation_failed, CODE.forbidden, CODE.not_found] },
});
// Notifications leave through the egress policy: regular activities, retried with backoff.
const notices = proxyActivities<ApprovalActivities>({
  startToCloseTimeout: '30s',
  retry: {
    initialInterval: '2s',
    backoffCoefficient: 2,
    maximumAttempts: 5,
    nonRetryableErrorTypes: [CODE.egress_denied, CODE.forbidden, CODE.connection_missing],
  },
});

/** Approvals of this run whose action reached a decision (module state is per workflow run). */
const woken = new Set<string>();
let listening = false;

function listen(): void {
  if (listening) return;
  listening = true;
  setHandler(approvalDecidedSignal, ({ actionId }) => void woken.add(actionId));
}

/** What the approval's timers are due for, in workflow time. */
interface Schedule {
  deadline: number;
  nextReminder: number | undefined;
  reminders: number;
  escalateAt: number | undefined;
}

function scheduleOf(opened: OpenedApproval, now: number): Schedule {
  return {
    deadline: now + opened.ttlMs,
    nextReminder: opened.remindEveryMs !== undefined && opened.maxReminders > 0 ? now + opened.remindEveryMs : undefined,
    reminders: 0,
    escalateAt: opened.escalateAfterMs !== undefined ? now + opened.escalateAfterMs : undefined,
  };
}

/** A notification that failed for good is logged and the approval goes on: the inbox and the page still show it. */
async function notify(awaits: NodeAwaits, opened: OpenedApproval, notice: ApprovalNotice): Promise<void> {
  if (!opened.notify) return;
  const { notify: to } = opened;
  try {
    await awaits.other(() => notices.notifyApprovers({ actionId: opened.actionId, notice, ...to }));
  } catch (err) {
    if (isCancellation(err)) throw err;
    log.warn('An approval notification could not be sent', { actionId: opened.actionId, notice, error: String(err) });
  }
}

/** Sends the reminder or the escalation that is due, and moves the schedule on. */
async function runDueTimer(awaits: NodeAwaits, opened: OpenedApproval, s: Schedule, now: number): Promise<void> {
  if (s.escalateAt !== undefined && now >= s.escalateAt) {
    s.escalateAt = undefined;
    const escalated = await awaits.local(() => bookkeeping.escalateApproval({ actionId: opened.actionId, ...opened.escalateTo! }));
    if (escalated.added > 0) await notify(awaits, opened, 'escalated');
    return;
  }
  if (s.nextReminder !== undefined && now >= s.nextReminder) {
    s.reminders++;
    s.nextReminder = s.reminders < opened.maxReminders ? s.nextReminder + opened.remindEveryMs! : undefined;
    await notify(awaits, opened, 'reminder');
  }
}

/** Waits for the stored decision, its deadline, reminders and the escalation; answers the node's outcome. */
async function decide(awaits: NodeAwaits, node: GraphNode, runId: string, opened: OpenedApproval, s: Schedule, startedAt: number): Promise<RunNodeOutput> {
  for (;;) {
    const due = Math.min(s.deadline, s.nextReminder ?? Infinity, s.escalateAt ?? Infinity);
    // While it waits the node holds no place among the run's nodes in flight.
    const wake = await awaits.pause(() => awaits.other(() => condition(() => woken.has(opened.actionId), Math.max(1, due - Date.now()))));
    const now = Date.now();
    if (wake || now >= s.deadline) {
      woken.delete(opened.actionId);
      const inline = awaits.inlineBytes !== undefined ? { inlineBytes: awaits.inlineBytes } : {};
      const settled = await awaits.local(() => bookkeeping.settleApproval({ node, runId, actionId: opened.actionId, expire: !wake, startedAt, ...inline }));
      // A decision that woke the run without being stored (its transaction rolled back) leaves the action pending.
      if (settled) return settled;
      continue;
    }
    await runDueTimer(awaits, opened, s, now);
  }
}

/** Opens the node's action on the gate and waits for its outcome (`branch`: approved, rejected or expired). */
export async function runApproval(node: GraphNode, context: RunNodeInput['context'], runId: string, awaits: NodeAwaits): Promise<RunNodeOutput> {
  listen();
  const startedAt = Date.now();
  const opened = await awaits.local(() => bookkeeping.openApproval({ node, context }, runId));
  // Timed from the moment the action is stored: the run's deadline is never before the stored one.
  const schedule = scheduleOf(opened, Date.now());
  try {
    await notify(awaits, opened, 'requested');
    return await decide(awaits, node, runId, opened, schedule, startedAt);
  } catch (err) {
    // A cancelled run ends its pending action too: nobody can decide it any more.
    if (isCancellation(err)) await CancellationScope.nonCancellable(() => awaits.local(() => bookkeeping.closeApproval(opened.actionId)));
    throw err;
  }
}
