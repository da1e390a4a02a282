import { ApplicationFailure, Context } from '@temporalio/activity';
import type { AgentActionStore } from '../src/agent/agent-action.store.js';
import type { ApprovalService } from '../src/approvals/approval.service.js';
import { HttpCallError, httpCall } from '../src/connections/http-call.js';
import type { ConnectionService } from '../src/connections/connection.service.js';
import type { Sql } from '../src/db/sql.js';
import { toIso } from '../src/db/sql.js';
import type { ExecutionRef } from '../src/executions/execution.mirror.js';
import { MAX_REMINDERS } from '../src/nodes/approval.node.js';
import { EgressDeniedError } from '../src/platform/egress.js';
import type { Metrics } from '../src/platform/metrics.js';
import type { ApprovalNotice, ApprovalOutcome, GraphNode, OpenedApproval, RunNodeInput, RunNodeOutput } from '../workflows/defs.js';
import { CODE } from '../workflows/error-codes.js';
import { patiently } from './patiently.js';
import { answer } from './run-values.js';
import { RunSteps, type RunExecution, type RunStepPorts } from './run-steps.js';
import { countAttempt } from './graph.activities.js';

// The steps of an approval node (workflows/approval.ts): open the action, notify, escalate, settle.

export interface ApprovalActivityPorts extends RunStepPorts {
  sql: Sql;
  stores: { agentActions: Pick<AgentActionStore, 'openWorkflow' | 'workflowAction' | 'votesOf' | 'expireWorkflow' | 'addApprovers'> };
  approvals: Pick<ApprovalService, 'recipients' | 'cancel'>;
  connections: Pick<ConnectionService, 'resolve'>;
  metrics: Pick<Metrics, 'workflowApprovals' | 'workflowApprovalSeconds' | 'workflowApprovalNotices' | 'nodeAttempts' | 'nodeDuration'>;
}

type Approvers = { users: string[] } | { capability: string };

interface ApprovalConfig {
  summary: string;
  details?: unknown;
  fields: Record<string, unknown>;
  editable?: Record<string, unknown>;
  approvers: Approvers;
  required: number;
  self_approval: boolean;
  timeout_ms: number;
  notify?: { connection_id: number; path: string };
  remind_every_ms?: number;
  escalate_after_ms?: number;
  escalate_to?: Approvers;
}

export function approvalActivities(ports: ApprovalActivityPorts, execution: RunExecution) {
  const steps = new RunSteps(ports, execution);
  return {
    openApproval: (input: RunNodeInput, runId: string) => openApproval(ports, steps, input, runId),
    notifyApprovers: (input: { actionId: string; notice: ApprovalNotice; connectionId: number; path: string }) => notifyApprovers(ports, input),
    escalateApproval: (input: { actionId: string; userIds: number[]; capabilities: string[] }) =>
      patiently(async () => ({ added: await ports.stores.agentActions.addApprovers(input.actionId, input.userIds, input.capabilities) })),
    settleApproval: (input: { node: GraphNode; runId: string; actionId: string; expire: boolean; startedAt: number; inlineBytes?: number }) =>
      settleApproval(ports, steps, input),
    closeApproval: (actionId: string) => patiently(() => ports.approvals.cancel(actionId)),
  };
}

const refuse = (message: string) => ApplicationFailure.nonRetryable(message, CODE.validation_failed);

/** Named approvers as user ids (each login must exist), or a capability. */
async function resolveApprovers(ports: ApprovalActivityPorts, approvers: Approvers, field: string): Promise<{ userIds: number[]; capabilities: string[] }> {
  if ('capability' in approvers) return { userIds: [], capabilities: [approvers.capability] };
  const rows = await patiently(() => ports.sql.query<{ id: number; login: string }>('select id, login from users where login = any(?)', [approvers.users]));
  const ids = new Map(rows.map((r) => [r.login, r.id]));
  const missing = approvers.users.findIndex((login) => !ids.has(login));
  if (missing >= 0) throw refuse(`${field}.users.${missing}: user ${approvers.users[missing]} does not exist`);
  return { userIds: [...new Set(approvers.users.map((l) => ids.get(l)!))], capabilities: [] };
}

/** Named users alone who cannot reach `required` (self-approval refusing the run's people): the action could never be approved. */
function checkDecidable(ref: ExecutionRef, config: ApprovalConfig, approvers: { userIds: number[]; capabilities: string[] }): void {
  if (approvers.capabilities.length || config.escalate_to) return;
  const eligible = approvers.userIds.filter((id) => config.self_approval || !ref.actingUserIds.includes(id));
  if (eligible.length < config.required) {
    throw refuse(
      `approvers: ${eligible.length} of the named approvers may decide (the people this run acts for may not while self_approval is false), fewer than the ${config.required} required`,
    );
  }
}

/** The approval's first step: evaluates its configuration, resolves its approvers and opens its action (idempotent on the run and node). */
async function openApproval(ports: ApprovalActivityPorts, steps: RunSteps, { node, context }: RunNodeInput, runId: string): Promise<OpenedApproval> {
  const ref = await steps.execution(runId);
  const startedAt = new Date();
  try {
    const { input, config } = await steps.config<ApprovalConfig>(ref, node, context);
    const approvers = await resolveApprovers(ports, config.approvers, 'approvers');
    const escalateTo = config.escalate_to ? await resolveApprovers(ports, config.escalate_to, 'escalate_to') : undefined;
    checkDecidable(ref, config, approvers);
    // A connection the run's people may not use fails the node now, not at the first notification.
    if (config.notify) await patiently(() => ports.connections.resolve(config.notify!.connection_id, ref.actingUserIds));
    await steps.write(ref, node, { status: 'running', started_at: startedAt, attempts: 1, input });
    const opened = await patiently(() =>
      ports.stores.agentActions.openWorkflow({
        executionId: ref.id,
        workflowId: ref.workflowId,
        nodeId: node.id,
        temporalWorkflowId: steps.temporalWorkflowId(),
        runId,
        requestedBy: ref.ownerId,
        summary: config.summary,
        details: config.details ?? null,
        fields: config.fields,
        editable: config.editable ?? null,
        required: config.required,
        selfApproval: config.self_approval,
        actingUserIds: ref.actingUserIds,
        approverIds: approvers.userIds,
        approverCapabilities: approvers.capabilities,
        ttlMs: config.timeout_ms,
      }),
    );
    return {
      actionId: opened.action_id,
      ttlMs: Number(opened.remaining_ms),
      ...(config.notify ? { notify: { connectionId: config.notify.connection_id, path: config.notify.path } } : {}),
      ...(config.remind_every_ms !== undefined ? { remindEveryMs: config.remind_every_ms } : {}),
      maxReminders: MAX_REMINDERS,
      ...(config.escalate_after_ms !== undefined && escalateTo ? { escalateAfterMs: config.escalate_after_ms, escalateTo } : {}),
    };
  } catch (err) {
    throw await steps.failed(ref, node, err, startedAt);
  }
}

/**
 * Posts the approvers' links to the node's connection (a chat webhook, typically), with its
 * credential, through the egress policy: `{action_id, execution_id, node_id, summary, notice,
 * expires_at, links: [{login, url}]}`, each link for an approver who may still decide. A 429 or
 * 5xx answer is tried again; a refusal by the egress policy or another answer is final.
 */
async function notifyApprovers(
  ports: ApprovalActivityPorts,
  input: { actionId: string; notice: ApprovalNotice; connectionId: number; path: string },
): Promise<{ sent: number }> {
  const row = await patiently(() => ports.stores.agentActions.workflowAction(input.actionId));
  if (!row || row.status !== 'pending') return { sent: 0 };
  const links = await patiently(() => ports.approvals.recipients(row));
  if (!links.length) return { sent: 0 };
  const connection = await patiently(() => ports.connections.resolve(input.connectionId, row.acting_user_ids));
  const body = {
    action_id: row.action_id,
    execution_id: Number(row.execution_id),
    node_id: row.node_id,
    summary: row.summary,
    notice: input.notice,
    expires_at: toIso(row.expires_at),
    links: links.map((l) => ({ login: l.login, url: l.url })),
  };
  const count = (outcome: string) => ports.metrics.workflowApprovalNotices.inc({ notice: input.notice, outcome });
  let result;
  try {
    result = await httpCall(connection, { method: 'POST', path: input.path, body }, { timeoutMs: 10_000, signal: Context.current().cancellationSignal });
  } catch (err) {
    count('failed');
    if (err instanceof EgressDeniedError) throw ApplicationFailure.nonRetryable(err.message, CODE.egress_denied);
    if (err instanceof HttpCallError)
      throw ApplicationFailure.create({ message: err.message, type: CODE.http_error, nonRetryable: err.reason === 'invalid_url' });
    throw err;
  }
  if (result.status < 200 || result.status >= 300) {
    count('failed');
    const message = `HTTP ${result.status} from POST ${input.path}`;
    if (result.status === 429 || result.status >= 500) throw ApplicationFailure.retryable(message, CODE.http_error);
    throw ApplicationFailure.nonRetryable(message, CODE.http_error);
  }
  count('sent');
  return { sent: links.length };
}

/**
 * Reads the stored outcome (waiting for a decision being stored), storing the expiry first when
 * the deadline passed: a decision holding the row wins over it. Null while the action is pending
 * (a wake-up whose decision was not stored); else records the node's end and answers its output.
 */
async function settleApproval(
  ports: ApprovalActivityPorts,
  steps: RunSteps,
  input: { node: GraphNode; runId: string; actionId: string; expire: boolean; startedAt: number; inlineBytes?: number },
): Promise<RunNodeOutput | null> {
  const { agentActions } = ports.stores;
  const ref = await steps.execution(input.runId);
  const expiredNow = input.expire && (await patiently(() => agentActions.expireWorkflow(input.actionId)));
  const row = await patiently(() => agentActions.workflowAction(input.actionId, 'share'));
  if (!row || row.status === 'pending') return null;
  const votes = await patiently(() => agentActions.votesOf([input.actionId]));
  // A closed action (its run was gone for a moment) took no decision: it counts as expired.
  const decision = row.status === 'approved' || row.status === 'rejected' ? row.status : 'expired';
  const output: ApprovalOutcome = {
    decision,
    fields: row.fields,
    decided_by: votes.map((v) => ({ login: v.login, decision: v.decision, note: v.note, at: toIso(v.decided_at)! })),
    branch: decision,
  };
  await steps.ended(ref, input.node, output, input.startedAt);
  if (expiredNow) {
    ports.metrics.workflowApprovals.inc({ outcome: 'expired' });
    ports.metrics.workflowApprovalSeconds.observe({ outcome: 'expired' }, row.age_seconds);
  }
  countAttempt(ports.metrics, input.node.type, 'success', undefined, Math.max(0, Date.now() - input.startedAt));
  return answer(input.node.id, { output, branch: decision }, input.inlineBytes);
}
