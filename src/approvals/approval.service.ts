import { WorkflowNotFoundError } from '@temporalio/client';
import type { ActingUsers } from '../auth/acting.js';
import type { AuthService, Principal } from '../auth/auth.service.js';
import { roles } from '../auth/capabilities.js';
import type { Sql } from '../db/sql.js';
import { toIso } from '../db/sql.js';
import { AppError, conflict, notFound, validationFailed } from '../platform/errors.js';
import type { Metrics } from '../platform/metrics.js';
import type { PublicUrl } from '../platform/public-url.js';
import type { TemporalHandle } from '../temporal/connection.js';
import { approvalDecidedSignal } from '../../workflows/run.signals.js';
import { isRefused, type AgentActionStore, type VoteRow, type WorkflowActionRow } from '../agent/agent-action.store.js';
import { signApprovalToken, type Signer } from './approval-tokens.js';
import { applyEdits, type EditableSchema, type SchemaCheck } from './editable-fields.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Where an approver's page is served; the token follows. */
export const APPROVAL_PAGE_PATH = '/api/workflow/v1/approvals';

/** Links a notification lists at most (capability approvers can be many). */
const MAX_LINKS = 100;

const CANCELLED_NOTE = 'The run that asked for this approval was cancelled';
const GONE_NOTE = 'The run that asked for this approval ended without it (terminated or reset)';

/** A decision as the API and the page take it. */
export interface ApprovalDecision {
  approved: boolean;
  note?: string | undefined;
  /** Approve only: changes to the editable fields. */
  fields?: Record<string, unknown> | undefined;
}

/** What a person may do with a workflow approval. */
export interface ApprovalRights {
  /** Named as an approver, or holding a capability that is. */
  approver: boolean;
  /** One of the people the run acts for (its owner, the author of its version, who started it). */
  ownRun: boolean;
  mayDecide: boolean;
  maySee: boolean;
}

/**
 * Who may decide and see a workflow approval. An approver decides, unless they are one of the
 * people the run acts for and `self_approval` is off; administrators are no exception (they are
 * approvers of a capability approval like anyone holding it, and are refused on their own runs).
 * Whoever may decide, the run's people, administrators and whoever decided may see it.
 */
export function approvalRights(
  principal: Principal,
  row: Pick<WorkflowActionRow, 'approver_ids' | 'approver_capabilities' | 'acting_user_ids' | 'self_approval'>,
  voted: boolean,
): ApprovalRights {
  const approver = row.approver_ids.includes(principal.id) || row.approver_capabilities.some((c) => principal.can(c));
  const ownRun = row.acting_user_ids.includes(principal.id);
  const mayDecide = approver && (row.self_approval || !ownRun);
  return { approver, ownRun, mayDecide, maySee: mayDecide || approver || ownRun || voted || principal.role === 'administrator' };
}

/** Why someone who may see an approval may not decide it. */
export function refusalOf(rights: ApprovalRights): string {
  if (rights.approver && rights.ownRun) {
    return 'This approval was asked by a run you act for (its owner, the author of its version or whoever started it) and self_approval is off: someone else decides it';
  }
  return 'You are not an approver of this action';
}

/** A workflow approval as the inbox, the action endpoint and a decision answer show it. */
export interface WorkflowActionView {
  source: 'workflow';
  action_id: string;
  execution_id: number;
  workflow_id: number;
  node_id: string;
  summary: string;
  details: unknown;
  fields: Record<string, unknown>;
  editable: Record<string, unknown> | null;
  status: WorkflowActionRow['status'];
  required: number;
  approvals: number;
  approvers: { users: { id: number; login: string }[]; capabilities: string[] };
  self_approval: boolean;
  requested_by: { id: number; login: string };
  created_at: string;
  age_seconds: number;
  expires_at: string;
  decided_at: string | null;
  decided_by: { id: number; login: string; decision: 'approved' | 'rejected'; note: string | null; at: string; fields: Record<string, unknown> | null }[];
  approve_url?: string;
}

/**
 * Workflow approvals on the gate: their views, decisions (through the gate's endpoints or an
 * approver's page), the approvers' links and who they go to. The action and its decisions are
 * stored by AgentActionStore; a decision that ends the action wakes the run under the action's
 * row lock, and the run reads the outcome from the stored action.
 */
export class ApprovalService {
  constructor(
    private readonly sql: Sql,
    private readonly actions: AgentActionStore,
    private readonly temporal: TemporalHandle,
    private readonly signer: Signer,
    private readonly people: Pick<ActingUsers, 'members'>,
    private readonly auth: Pick<AuthService, 'principal'>,
    private readonly publicUrl: PublicUrl,
    /** Where an approver's edits are checked against the node's `editable` schema (the expression sandbox's threads). */
    private readonly schemaCheck: SchemaCheck,
    private readonly metrics?: Pick<Metrics, 'workflowApprovals' | 'workflowApprovalSeconds'>,
  ) {}

  /** The page link of one approver: signed for them and this action, dead at the action's deadline. */
  linkFor(row: Pick<WorkflowActionRow, 'action_id' | 'expires_at'>, userId: number, origin?: string): string {
    const expiresAt = Math.ceil(new Date(row.expires_at).getTime() / 1000);
    return `${this.publicUrl.base(origin)}${APPROVAL_PAGE_PATH}/${signApprovalToken(this.signer, { actionId: row.action_id, userId, expiresAt })}`;
  }

  /** The views of workflow approvals, with their decisions and approvers read at once. */
  async views(principal: Principal, rows: WorkflowActionRow[], origin?: string): Promise<WorkflowActionView[]> {
    const votes = await this.actions.votesOf(rows.map((r) => r.action_id));
    const ids = [...new Set(rows.flatMap((r) => r.approver_ids))];
    const logins = new Map(
      ids.length
        ? (await this.sql.query<{ id: number; login: string }>('select id, login from users where id = any(?)', [ids])).map((u) => [u.id, u.login])
        : [],
    );
    return rows.map((row) => {
      const own = votes.filter((v) => v.action_id === row.action_id);
      const voted = own.some((v) => v.user_id === principal.id);
      const rights = approvalRights(principal, row, voted);
      const open = row.status === 'pending' && !row.past;
      return {
        ...viewOf(row, own, logins),
        ...(open && rights.mayDecide && !voted ? { approve_url: this.linkFor(row, principal.id, origin) } : {}),
      };
    });
  }

  /** One workflow approval the caller may see; else 404. */
  async view(principal: Principal, row: WorkflowActionRow, origin?: string): Promise<WorkflowActionView> {
    const [view] = await this.views(principal, [row], origin);
    const voted = view!.decided_by.some((d) => d.id === principal.id);
    if (!approvalRights(principal, row, voted).maySee) throw notFound('Action');
    return view!;
  }

  /**
   * Decides `actionId` when it is a workflow approval (answers its view afterwards); undefined for
   * an agent's action, which the agent's gate decides. `args` and `stream` belong to the agent's
   * actions, `fields` to workflow approvals: each is refused on the other (400 naming it).
   */
  async decideIfWorkflow(
    principal: Principal,
    actionId: string,
    decision: ApprovalDecision & { args?: unknown; stream?: boolean | undefined },
    origin?: string,
  ): Promise<WorkflowActionView | undefined> {
    const row = UUID.test(actionId) ? await this.actions.withSession(actionId) : undefined;
    if (row?.source !== 'workflow') {
      if (decision.fields !== undefined && row)
        throw validationFailed([{ field: 'fields', message: "applies to workflow approvals; an agent action's arguments are edited with args" }]);
      return undefined;
    }
    if (decision.args !== undefined)
      throw validationFailed([{ field: 'args', message: 'applies to agent actions; a workflow approval is edited with fields' }]);
    if (decision.stream) throw validationFailed([{ field: 'stream', message: 'applies to agent actions; a workflow approval answers the action itself' }]);
    const voted = (await this.actions.votesOf([actionId])).some((v) => v.user_id === principal.id);
    const rights = approvalRights(principal, row, voted);
    if (!rights.maySee) throw notFound('Action');
    if (!rights.mayDecide && !voted) throw new AppError('forbidden', refusalOf(rights), { self_approval: row.self_approval });
    await this.record(principal, row, decision);
    return this.view(principal, (await this.actions.workflowAction(actionId))!, origin);
  }

  /**
   * Records one approver's decision (the checks of who may decide are the caller's): refused with
   * 409 once the action ended or expired or when this person decided already, 400 naming each
   * edited field the `editable` schema refuses (nothing is stored). The decision that ends the
   * action wakes the run before it is committed; a run that is gone closes the action instead.
   */
  async record(principal: Principal, row: WorkflowActionRow, decision: ApprovalDecision): Promise<void> {
    const editable = row.editable as EditableSchema | null;
    const edits = decision.approved ? decision.fields : undefined;
    let result;
    try {
      result = await this.actions.vote(
        row.action_id,
        { userId: principal.id, approved: decision.approved, note: decision.note ?? null, edits },
        async (current) => {
          const applied = await applyEdits(editable, current, edits ?? {}, this.schemaCheck);
          if ('problems' in applied) throw validationFailed(applied.problems);
          return applied.fields;
        },
        (locked) => this.wake(locked, row.action_id),
      );
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
      const closed = await this.actions.cancelWorkflow(row.action_id, GONE_NOTE);
      if (closed) this.metrics?.workflowApprovals.inc({ outcome: 'cancelled' });
      throw conflict(
        'action_already_decided',
        `The run that asked for action ${row.action_id} ended before this decision; the action was closed as cancelled`,
        {
          status: 'cancelled',
        },
      );
    }
    if (isRefused(result) || result.refused) {
      const status = (result as { status: string }).status;
      if (status === 'voted') throw conflict('approver_already_decided', `You already decided action ${row.action_id}; it waits for its other approvers`);
      if (status === 'expired')
        throw conflict('action_expired', `Action ${row.action_id} expired before it was decided`, { expires_at: toIso(row.expires_at) });
      throw conflict('action_already_decided', `Action ${row.action_id} was already ${status}`, { status });
    }
    if (result.status !== 'pending') {
      this.metrics?.workflowApprovals.inc({ outcome: result.status });
      this.metrics?.workflowApprovalSeconds.observe({ outcome: result.status }, result.ageSeconds);
    }
  }

  /** Wakes the run that waits for this action (its own run: a reset's new run waits for an action of its own). */
  private async wake(locked: { temporal_workflow_id: string; temporal_run_id: string }, actionId: string): Promise<void> {
    await this.temporal.client.workflow.getHandle(locked.temporal_workflow_id, locked.temporal_run_id).signal(approvalDecidedSignal, { actionId });
  }

  /** The run was cancelled: its pending approval ends too. */
  async cancel(actionId: string): Promise<void> {
    if (await this.actions.cancelWorkflow(actionId, CANCELLED_NOTE)) this.metrics?.workflowApprovals.inc({ outcome: 'cancelled' });
  }

  /**
   * The worker's sweep: a run terminated or reset in Temporal never settles its approval (its
   * timer went with it); once its record says it ended, the approval ends `cancelled`.
   */
  async sweep(): Promise<void> {
    const closed = await this.actions.cancelOrphaned(GONE_NOTE);
    if (closed) this.metrics?.workflowApprovals.inc({ outcome: 'cancelled' }, closed);
  }

  /**
   * The approvers who may still decide, each with their link: the named users and the holders of
   * a named capability, but not the run's people unless self-approval is on, nor who decided.
   */
  async recipients(row: WorkflowActionRow): Promise<{ id: number; login: string; url: string }[]> {
    const capable = roles.filter((role) => row.approver_capabilities.some((c) => this.auth.principal({ id: 0, login: '', role }, 'app_password').can(c)));
    const users = await this.sql.query<{ id: number; login: string }>(
      `select u.id, u.login from users u where (u.id = any(?) or u.role = any(?))
          and (?::boolean or not u.id = any(?))
          and not exists (select 1 from agent_action_votes v where v.action_id = ? and v.user_id = u.id)
        order by u.id limit ?`,
      [row.approver_ids, capable, row.self_approval, row.acting_user_ids, row.action_id, MAX_LINKS],
    );
    return users.map((u) => ({ ...u, url: this.linkFor(row, u.id) }));
  }

  /** A person as a principal (for a decision made on their page); undefined when they no longer exist. */
  async personOf(userId: number): Promise<Principal | undefined> {
    return (await this.people.members([userId]))?.[0];
  }

  /** The decisions on an action, for its page. */
  votesOf(actionId: string): Promise<VoteRow[]> {
    return this.actions.votesOf([actionId]);
  }
}

/** The stored approval as the API shows it. */
function viewOf(row: WorkflowActionRow, votes: VoteRow[], logins: Map<number, string>): WorkflowActionView {
  return {
    source: 'workflow',
    action_id: row.action_id,
    execution_id: Number(row.execution_id),
    workflow_id: row.workflow_id,
    node_id: row.node_id,
    summary: row.summary,
    details: row.details ?? null,
    fields: row.fields,
    editable: row.editable,
    status: row.status,
    required: row.required,
    approvals: votes.filter((v) => v.decision === 'approved').length,
    approvers: { users: row.approver_ids.map((id) => ({ id, login: logins.get(id) ?? '' })), capabilities: row.approver_capabilities },
    self_approval: row.self_approval,
    requested_by: { id: row.requested_by, login: row.owner_login ?? '' },
    created_at: toIso(row.created_at)!,
    age_seconds: row.age_seconds,
    expires_at: toIso(row.expires_at)!,
    decided_at: row.status === 'pending' ? null : toIso(row.decided_at),
    decided_by: votes.map((v) => ({ id: v.user_id, login: v.login, decision: v.decision, note: v.note, at: toIso(v.decided_at)!, fields: v.fields })),
  };
}
