import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { z } from 'zod';
import type { Principal } from '../auth/auth.service.js';
import type { Sql } from '../db/sql.js';
import { toIso } from '../db/sql.js';
import { AppError, conflict, notFound, validationFailed, type FieldProblem } from '../platform/errors.js';
import type { TemporalHandle } from '../temporal/connection.js';
import { agentDecisionUpdate } from '../../workflows/agent.updates.js';
import {
  AGENT_ACTION_NOT_APPROVED,
  agentSessionWorkflowId,
  type AgentActionStatus,
  type AgentApprovalPolicy,
  type AgentTurnOutcome,
} from '../../workflows/defs.js';
import { loadSession } from './agent.store.js';
import { isRefused, type ActionWithSession, type AgentActionStore, type WorkflowActionRow } from './agent-action.store.js';
import type { ApprovalService, WorkflowActionView } from '../approvals/approval.service.js';
import { agentTools, type AgentToolPorts } from './agent.tools.js';
import { acceptedTurn, countOutcome, failure, type AcceptedTurn, type DecidedData } from './agent.turns.js';
import type { Metrics } from '../platform/metrics.js';
import { capabilities } from '../auth/capabilities.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * What a caller may do with a session's actions under its approval policy: `owner` lets only the
 * session owner decide; `others` only someone else holding svc_agent_approve (four eyes); `any`
 * both. Whoever may decide may see the actions; administrators see every session anyway.
 */
export function gateRights(principal: Principal, session: { owner_id: number; approval: AgentApprovalPolicy }) {
  const owner = session.owner_id === principal.id;
  const approver = principal.can('svc_agent_approve');
  const mayDecide = session.approval === 'owner' ? owner : session.approval === 'others' ? !owner && approver : owner || approver;
  return { mayDecide, maySee: mayDecide || owner || principal.role === 'administrator' };
}

/** One action as the inbox, the audit and the action endpoint show it. */
function actionView(row: ActionWithSession) {
  return {
    source: 'agent' as const,
    action_id: row.action_id,
    session_id: row.session_id,
    turn_id: row.turn_id,
    tool: row.tool,
    args: row.args,
    edited_args: row.edited_args,
    summary: row.summary,
    status: row.status,
    approval: row.approval,
    requested_by: { id: row.owner_id, login: row.owner_login },
    created_at: toIso(row.created_at)!,
    age_seconds: row.age_seconds,
    expires_at: toIso(row.expires_at),
    decided_by: row.decided_by === null ? null : { id: row.decided_by, login: row.decided_by_login ?? '' },
    decided_at: row.status === 'pending' ? null : toIso(row.decided_at),
    note: row.note,
    outcome: row.outcome ? { ...row.outcome, finished_at: toIso(row.outcome_at) } : null,
  };
}
export type ActionView = ReturnType<typeof actionView>;

/**
 * What a decider who is not the session's owner is answered once the turn reaches its next
 * outcome: the action as decided, with the decided tool's outcome, and where the turn went. Not
 * the turn itself: after the decided tool it runs with the owner's rights (a search the decider
 * could not make, the model's text about it), which is the owner's to see in the session. A
 * decision the tool activity refused is the same 409 the owner would get, without the turn's
 * data.
 */
function decidedView(action: ActionView, outcome: AgentTurnOutcome): DecidedData {
  if (outcome.outcome === 'failed' && outcome.error.code === AGENT_ACTION_NOT_APPROVED) {
    failure({ ...outcome, tools_called: [], telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 } });
  }
  return {
    outcome: 'decided',
    action,
    turn: outcome.outcome,
    ...(outcome.outcome === 'gate_pending' ? { pending_action: outcome.pending_action } : {}),
  };
}

/** The approver's arguments against the tool's own schema, strictly: an unknown field is named too. */
function validateEditedArgs(tool: string, args: Record<string, unknown>): Record<string, unknown> {
  const spec = agentTools.get(tool);
  if (!spec) throw validationFailed([{ field: 'args', message: `the tool ${tool} no longer exists` }]);
  const parsed = (spec.args as z.ZodObject).strict().safeParse(args);
  if (parsed.success) return parsed.data as Record<string, unknown>;
  const problems: FieldProblem[] = parsed.error.issues.flatMap((issue) => {
    const path = ['args', ...issue.path.map(String)].join('.');
    return issue.code === 'unrecognized_keys'
      ? issue.keys.map((k) => ({ field: `${path}.${k}`, message: 'is not an argument of this tool' }))
      : [{ field: path, message: issue.message }];
  });
  throw validationFailed(problems);
}

/**
 * Refuses an approver's edit that the tool itself would refuse (checked with the rights it would
 * run with), naming the argument, so that the decision is not taken and the action stays pending.
 */
async function checkAsTheToolWould(tool: string, ports: AgentToolPorts, runner: Principal, args: Record<string, unknown>): Promise<void> {
  const spec = agentTools.get(tool);
  try {
    await spec?.check?.(ports, runner, args);
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    const errors = (err.data?.errors as FieldProblem[] | undefined) ?? [];
    if (err.code === 'validation_failed' && errors.length) {
      throw validationFailed(errors.map((e) => ({ field: `args.fields.${e.field}`, message: e.message })));
    }
    if (err.status === 404) {
      const field = 'entity' in args ? 'args.entity' : 'workflow_id' in args ? 'args.workflow_id' : 'args';
      throw validationFailed([{ field, message: err.message }]);
    }
    throw err;
  }
}

/** `row` when it is an agent action the caller may see (see visibleAction); else 404. */
function visibleAgentAction(principal: Principal, row: ActionWithSession | WorkflowActionRow | undefined): ActionWithSession {
  if (!row || row.source !== 'agent' || (!gateRights(principal, row).maySee && row.decided_by !== principal.id)) throw notFound('Action');
  return row;
}

/** The side-effect gate's API side: decisions, the inbox and the audit trail of actions. */
export class AgentGateService {
  constructor(
    private readonly sql: Sql,
    private readonly actions: AgentActionStore,
    private readonly temporal: TemporalHandle,
    /** What the tools act on: an approver's edit is checked against them before it is stored. */
    private readonly tools: AgentToolPorts,
    private readonly metrics?: Pick<Metrics, 'agentTurns' | 'agentActions' | 'agentDecisionSeconds'>,
    /** Workflow approvals share the gate's inbox and action endpoint; they are shown by their own service. */
    private readonly approvals?: Pick<ApprovalService, 'view' | 'views'>,
  ) {}

  /** An agent action the caller may see (they may decide it, own or administer its session, or decided it); else 404. */
  private async visibleAction(principal: Principal, actionId: string): Promise<ActionWithSession> {
    return visibleAgentAction(principal, UUID.test(actionId) ? await this.actions.withSession(actionId) : undefined);
  }

  /** One action of the gate: an agent's, or a workflow approval (`origin`: for its approver's link). */
  async action(principal: Principal, actionId: string, origin?: string): Promise<ActionView | WorkflowActionView> {
    const row = UUID.test(actionId) ? await this.actions.withSession(actionId) : undefined;
    if (row?.source === 'workflow' && this.approvals) return this.approvals.view(principal, row, origin);
    return actionView(visibleAgentAction(principal, row));
  }

  /** The audit trail of one session, oldest first. */
  async sessionActions(principal: Principal, sessionId: string, page: number, perPage: number) {
    const session = UUID.test(sessionId) ? await loadSession(this.sql, sessionId) : undefined;
    if (!session || !gateRights(principal, session).maySee) throw notFound('Session');
    const { rows, total } = await this.actions.sessionPage(sessionId, page, perPage);
    return { items: rows.map(actionView), total, page, per_page: perPage };
  }

  /** The actions the caller may decide or has decided, newest first: the agent's and the workflows' approvals. */
  async inbox(
    principal: Principal,
    query: { status?: AgentActionStatus | undefined; source?: 'agent' | 'workflow' | undefined; page: number; per_page: number },
    origin?: string,
  ) {
    const approver = principal.can('svc_agent_approve');
    const held = capabilities.filter((c) => principal.can(c));
    const filter = { status: query.status, source: this.approvals ? query.source : 'agent' };
    const { rows, total } = await this.actions.inboxPage({ id: principal.id, approver, capabilities: held }, filter, query.page, query.per_page);
    const workflowRows = rows.filter((r): r is WorkflowActionRow => r.source === 'workflow');
    const shown = new Map(
      (this.approvals && workflowRows.length ? await this.approvals.views(principal, workflowRows, origin) : []).map((v) => [v.action_id, v]),
    );
    const items = rows.flatMap((r): (ActionView | WorkflowActionView)[] =>
      r.source === 'agent' ? [actionView(r)] : shown.has(r.action_id) ? [shown.get(r.action_id)!] : [],
    );
    return { items, total, page: query.page, per_page: query.per_page };
  }

  /**
   * Decides a pending action once. The row is claimed under a row lock that is held until the
   * session workflow accepted the decision, so a refused or failed update leaves no trace (the
   * audit trail is never rewritten), the gate's expiry waits for the outcome, and the tool
   * activity reads the committed decision.
   */
  async decide(
    principal: Principal,
    actionId: string,
    decision: { approved: boolean; note?: string | undefined; args?: Record<string, unknown> | undefined },
    streamChannel?: string,
  ): Promise<AcceptedTurn> {
    const action = await this.visibleAction(principal, actionId);
    if (!gateRights(principal, action).mayDecide) {
      const why =
        action.approval === 'others' && action.owner_id === principal.id
          ? 'This session asks for four eyes: someone other than its owner decides its actions'
          : action.approval === 'owner'
            ? 'Only the session owner decides the actions of this session'
            : "Deciding actions of another user's session needs the capability svc_agent_approve";
      throw new AppError('forbidden', why, { approval: action.approval });
    }
    if (action.status === 'expired')
      throw conflict('action_expired', `Action ${actionId} expired before it was decided`, { expires_at: toIso(action.expires_at) });
    if (action.status !== 'pending') throw conflict('action_already_decided', `Action ${actionId} was already ${action.status}`, { status: action.status });
    const edited = decision.args ? validateEditedArgs(action.tool, decision.args) : undefined;
    // Edited arguments run with the approver's rights (see agentRunTool): checked with them.
    if (edited) await checkAsTheToolWould(action.tool, this.tools, principal, edited);
    // Only the session's owner follows the turn (its events, its outcome); anyone else gets the decision.
    const owner = action.owner_id === principal.id;
    try {
      const turn = await this.claimAndSend(action.session_id, actionId, decision, edited, principal, owner ? streamChannel : undefined);
      this.metrics?.agentActions.inc({ status: decision.approved ? 'approved' : 'rejected' });
      this.metrics?.agentDecisionSeconds.observe({ decision: decision.approved ? 'approved' : 'rejected' }, action.age_seconds);
      if (!owner) turn.decided = async (outcome) => decidedView(actionView(await this.visibleAction(principal, actionId)), outcome);
      return countOutcome(turn, this.metrics);
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
      // The session's workflow is gone (terminated in the Temporal Web UI, say): the turn that
      // waited at this gate cannot go on. The action is closed as the next message would close it.
      const closed = await this.actions.rejectAbandoned({ actionId });
      throw conflict(
        'action_already_decided',
        `The session's workflow ended before this decision, so its turn cannot go on${closed ? '; the action was closed as rejected' : ''}. Send the session a new message to carry on.`,
        { status: 'rejected' },
      );
    }
  }

  /** Stores the decision under the action's row lock, held until the session workflow accepted it. */
  private async claimAndSend(
    sessionId: string,
    actionId: string,
    decision: { approved: boolean; note?: string | undefined },
    edited: Record<string, unknown> | undefined,
    principal: Principal,
    streamChannel: string | undefined,
  ): Promise<AcceptedTurn> {
    const handle = this.temporal.client.workflow.getHandle(agentSessionWorkflowId(sessionId));
    const answer = await this.actions.decide(
      actionId,
      { approved: decision.approved, note: decision.note ?? null, decidedBy: principal.id, editedArgs: edited },
      (stored) =>
        acceptedTurn(() =>
          handle.startUpdate(agentDecisionUpdate, {
            args: [
              {
                actionId,
                approved: decision.approved,
                decidedBy: principal.id,
                ...(decision.note !== undefined ? { note: decision.note } : {}),
                ...(stored.edited_args ? { editedArgs: stored.edited_args } : {}),
                ...(streamChannel ? { streamChannel } : {}),
              },
            ],
            // One id per attempt: a decision whose first sending reached the workflow although this
            // call failed (and the claim was rolled back) must not be answered from that attempt.
            updateId: `decision-${actionId}-${randomUUID()}`,
            waitForStage: 'ACCEPTED',
          }),
        ),
    );
    if (!isRefused(answer)) return answer;
    if (answer.status === 'expired')
      throw conflict('action_expired', `Action ${actionId} expired before it was decided`, { expires_at: toIso(answer.expires_at) });
    throw conflict('action_already_decided', `Action ${actionId} was already ${answer.status}`, { status: answer.status });
  }

  /** Actions of a session that expired between the turn before `turnId` and `turnId` (the `done` of that turn reports them). */
  async expiredBefore(sessionId: string, turnId: string): Promise<{ action_id: string; tool: string; summary: string; expired_at: string }[]> {
    const rows = await this.actions.expiredBefore(sessionId, turnId);
    return rows.map((r) => ({ action_id: r.action_id, tool: r.tool, summary: r.summary, expired_at: toIso(r.decided_at)! }));
  }
}
