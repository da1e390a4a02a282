import type { Queryable, Sql } from '../db/sql.js';
import type { AgentActionStatus, AgentApprovalPolicy, AgentToolCall } from '../../workflows/defs.js';
import type { ActionRow } from './agent.store.js';

/**
 * The one owner of `agent_actions` and `agent_action_votes`: the side-effect gate's audit trail
 * and its state machine, for the agent's gated tool calls and for the approvals of workflow runs
 * (`source`).
 *
 *     pending ──approve──▶ approved ──(agent: run once: started_at, then outcome)
 *        ├──────reject───▶ rejected
 *        ├──────expire───▶ expired
 *        └──────cancel───▶ cancelled   (a workflow approval whose run was cancelled or is gone)
 *
 * Only a pending action changes status, and only once: every transition below is one statement
 * guarded by `status = 'pending'` (a decision also by the deadline, under the row lock), so
 * whichever of a decision, the gate's timer and a restarted session (or a cancelled run) comes
 * first wins and the others find the action decided. A workflow approval that needs several
 * approvers collects their decisions as votes under the same row lock: the vote that reaches
 * `required` approvals (or the first rejection) is the decision. Nothing else in the service
 * writes these tables.
 */
export const ACTION_TRANSITIONS: Readonly<Record<AgentActionStatus, readonly AgentActionStatus[]>> = {
  pending: ['approved', 'rejected', 'expired', 'cancelled'],
  approved: [],
  rejected: [],
  expired: [],
  cancelled: [],
};

/** The stored action as the gate check reads it: the row, and whether it matches this call. */
export type CheckedActionRow = ActionRow & { same_call: boolean; same_edit: boolean };

/** An action with its session's owner and policy, as the inbox, the audit and the action endpoint read it. */
export interface ActionWithSession extends ActionRow {
  source: 'agent';
  owner_id: number;
  owner_login: string;
  approval: AgentApprovalPolicy;
  decided_by_login: string | null;
  age_seconds: number;
}

/** A workflow run's approval as stored: who asked, who may decide, what they see and may edit. */
export interface WorkflowActionRow {
  source: 'workflow';
  action_id: string;
  execution_id: string;
  workflow_id: number;
  node_id: string;
  temporal_workflow_id: string;
  temporal_run_id: string;
  summary: string;
  details: unknown;
  fields: Record<string, unknown>;
  editable: Record<string, unknown> | null;
  status: AgentActionStatus;
  required: number;
  self_approval: boolean;
  acting_user_ids: number[];
  approver_ids: number[];
  approver_capabilities: string[];
  requested_by: number;
  owner_id: number;
  owner_login: string | null;
  note: string | null;
  decided_by: number | null;
  decided_at: Date | string | null;
  expires_at: Date | string;
  created_at: Date | string;
  age_seconds: number;
  /** The deadline has passed (the action may still say pending until its run's timer stores the expiry). */
  past: boolean;
}

/** One approver's decision on a workflow approval. */
export interface VoteRow {
  action_id: string;
  user_id: number;
  login: string;
  decision: 'approved' | 'rejected';
  note: string | null;
  fields: Record<string, unknown> | null;
  decided_at: Date | string;
}

/** Why a vote was not stored: the action is no longer pending (or past its deadline), or this approver voted already. */
export type VoteRefused = DecisionRefused | { refused: true; status: 'voted'; expires_at: Date | string | null };

/** Why a decision was not stored: the action had left `pending` (or its deadline had passed). */
export interface DecisionRefused {
  refused: true;
  /** `expired` also when the action is still pending but past its deadline. */
  status: Exclude<AgentActionStatus, 'pending'>;
  expires_at: Date | string | null;
}

// An agent action's owner is its session's; a workflow approval's is who its run asked for (the workflow's owner).
const SELECT_ACTION = `select a.*, coalesce(s.owner_id, a.requested_by) as owner_id, o.login as owner_login, s.approval, d.login as decided_by_login,
         floor(extract(epoch from (now() - a.created_at)))::int as age_seconds, coalesce(a.expires_at <= now(), false) as past
    from agent_actions a left join agent_sessions s on s.id = a.session_id left join users o on o.id = coalesce(s.owner_id, a.requested_by)
    left join users d on d.id = a.decided_by`;

/** What of a workflow approval's answer the run's settle step reads. */
const SELECT_WORKFLOW_ACTION = `select a.*, a.requested_by as owner_id, o.login as owner_login,
         floor(extract(epoch from (now() - a.created_at)))::int as age_seconds, coalesce(a.expires_at <= now(), false) as past
    from agent_actions a left join users o on o.id = a.requested_by where a.action_id = ? and a.source = 'workflow'`;

const RESTARTED_NOTE = 'The session restarted before a decision';

export class AgentActionStore {
  constructor(private readonly sql: Sql) {}

  // --- transitions -------------------------------------------------------------------------

  /**
   * Records a gated call as pending (idempotent on its action id: a retried activity finds its
   * row). With `ttlSeconds` the action gets its deadline; answers the stored deadline and the
   * milliseconds left until it.
   */
  async open(input: {
    actionId: string;
    sessionId: string;
    turnId: string;
    call: AgentToolCall;
    summary: string;
    ttlSeconds: number | null;
  }): Promise<{ expires_at: Date | string | null; remaining_ms: string | null } | undefined> {
    await this.sql.query(
      `insert into agent_actions (action_id, session_id, turn_id, tool_call_id, tool, args, summary, status, expires_at)
         values (?, ?, ?, ?, ?, ?, ?, 'pending', now() + make_interval(secs => ?::int)) on conflict (action_id) do nothing`,
      [input.actionId, input.sessionId, input.turnId, input.call.id, input.call.name, JSON.stringify(input.call.args), input.summary, input.ttlSeconds],
    );
    const [row] = await this.sql.query<{ expires_at: Date | string | null; remaining_ms: string | null }>(
      `select expires_at, greatest(0, ceil(extract(epoch from (expires_at - now())) * 1000)) as remaining_ms from agent_actions where action_id = ?`,
      [input.actionId],
    );
    return row;
  }

  /**
   * pending → approved | rejected. Claims the row under `for update` and keeps the lock while
   * `deliver` runs (the API holds it until the session workflow accepted the decision), so a
   * failed delivery rolls the decision back and leaves no trace, the gate's expiry waits for the
   * outcome, and the tool activity reads the committed decision. Arguments equal to the model's
   * are no edit. Answers what `deliver` returned, or why the decision was refused.
   */
  decide<T>(
    actionId: string,
    decision: { approved: boolean; note: string | null; decidedBy: number; editedArgs: Record<string, unknown> | undefined },
    deliver: (stored: { edited_args: Record<string, unknown> | null }) => Promise<T>,
  ): Promise<T | DecisionRefused> {
    return this.sql.transaction(async (tx) => {
      const [row] = await tx.query<{ status: AgentActionStatus; past: boolean; expires_at: Date | string | null }>(
        'select status, expires_at, coalesce(expires_at <= now(), false) as past from agent_actions where action_id = ? for update',
        [actionId],
      );
      const target = decision.approved ? 'approved' : 'rejected';
      if (row!.status === 'pending' && row!.past) return { refused: true, status: 'expired', expires_at: row!.expires_at };
      if (!ACTION_TRANSITIONS[row!.status].includes(target))
        return { refused: true, status: row!.status as DecisionRefused['status'], expires_at: row!.expires_at };
      const edit = decision.editedArgs ? JSON.stringify(decision.editedArgs) : null;
      const [stored] = await tx.query<{ edited_args: Record<string, unknown> | null }>(
        `update agent_actions set status = ?, note = ?, decided_by = ?, decided_at = now(),
                edited_args = case when ?::jsonb is null or ?::jsonb = args then null else ?::jsonb end
          where action_id = ? returning edited_args`,
        [target, decision.note, decision.decidedBy, edit, edit, edit, actionId],
      );
      return deliver(stored!);
    });
  }

  /**
   * pending → expired (the gate's timer fired). A decision being stored holds the row lock, so
   * this waits for it. Answers the status afterwards (`expired`, or the decision that won) and
   * whether this call expired it; undefined when the action does not exist.
   */
  async expire(actionId: string, sessionId: string): Promise<{ status: AgentActionStatus; expiredNow: boolean } | undefined> {
    const [expired] = await this.sql.query<{ status: AgentActionStatus }>(
      `update agent_actions set status = 'expired', decided_at = now() where action_id = ? and session_id = ? and status = 'pending' returning status`,
      [actionId, sessionId],
    );
    if (expired) return { status: expired.status, expiredNow: true };
    const [row] = await this.sql.query<{ status: AgentActionStatus }>('select status from agent_actions where action_id = ? and session_id = ?', [
      actionId,
      sessionId,
    ]);
    return row ? { status: row.status, expiredNow: false } : undefined;
  }

  /**
   * pending → rejected because the session's workflow is gone, so no turn waits at the gate any
   * more: one action, or every pending action of a session. Answers how many were closed.
   */
  async rejectAbandoned(where: { actionId: string } | { sessionId: string }): Promise<number> {
    const [column, value] = 'actionId' in where ? ['action_id', where.actionId] : ['session_id', where.sessionId];
    const rows = await this.sql.query(
      `update agent_actions set status = 'rejected', note = ?, decided_at = now() where ${column} = ? and status = 'pending' returning 1`,
      [RESTARTED_NOTE, value],
    );
    return rows.length;
  }

  /** Marks an approved action as started; false when an earlier attempt already started it (it runs at most once). */
  async claimRun(actionId: string): Promise<boolean> {
    const rows = await this.sql.query('update agent_actions set started_at = now() where action_id = ? and started_at is null returning action_id', [actionId]);
    return rows.length > 0;
  }

  /** Stores how a decided action ended (first outcome wins). */
  async recordOutcome(actionId: string, outcome: { ok: boolean; result_summary: string }): Promise<void> {
    await this.sql.query(`update agent_actions set outcome = ?, outcome_at = now() where action_id = ? and outcome is null`, [
      JSON.stringify(outcome),
      actionId,
    ]);
  }

  // --- workflow approvals ----------------------------------------------------------------------

  /**
   * Opens a run's approval as pending, expiring in `ttlMs` (idempotent on the run and its node: a
   * retried step finds its action). Answers its id, status and the milliseconds left.
   */
  async openWorkflow(input: {
    executionId: number;
    workflowId: number;
    nodeId: string;
    temporalWorkflowId: string;
    runId: string;
    requestedBy: number;
    summary: string;
    details: unknown;
    fields: Record<string, unknown>;
    editable: Record<string, unknown> | null;
    required: number;
    selfApproval: boolean;
    actingUserIds: number[];
    approverIds: number[];
    approverCapabilities: string[];
    ttlMs: number;
  }): Promise<{ action_id: string; status: AgentActionStatus; remaining_ms: string }> {
    await this.sql.query(
      `insert into agent_actions (action_id, source, execution_id, workflow_id, node_id, temporal_workflow_id, temporal_run_id, requested_by, summary,
                                  details, fields, editable, required, self_approval, acting_user_ids, approver_ids, approver_capabilities, status, expires_at)
       values (gen_random_uuid(), 'workflow', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', now() + (? * interval '1 millisecond'))
       on conflict (temporal_run_id, node_id) where source = 'workflow' do nothing`,
      [
        input.executionId,
        input.workflowId,
        input.nodeId,
        input.temporalWorkflowId,
        input.runId,
        input.requestedBy,
        input.summary,
        JSON.stringify(input.details ?? null),
        JSON.stringify(input.fields),
        input.editable ? JSON.stringify(input.editable) : null,
        input.required,
        input.selfApproval,
        input.actingUserIds,
        input.approverIds,
        input.approverCapabilities,
        input.ttlMs,
      ],
    );
    const [row] = await this.sql.query<{ action_id: string; status: AgentActionStatus; remaining_ms: string }>(
      `select action_id, status, greatest(0, ceil(extract(epoch from (expires_at - now())) * 1000)) as remaining_ms from agent_actions
        where source = 'workflow' and temporal_run_id = ? and node_id = ?`,
      [input.runId, input.nodeId],
    );
    return row!;
  }

  /**
   * One approver's decision on a workflow approval, under the action's row lock: refused once the
   * action left `pending` or passed its deadline, or when this approver decided already. An
   * approval's edits are merged into the fields by `merge` (which throws to refuse them; nothing
   * is stored then). The decision that ends the action (the first rejection, or the approval
   * reaching `required`) sets its status, and `deliver` (the run's wake-up) runs before the lock is
   * released: a failed delivery undoes the decision.
   */
  vote(
    actionId: string,
    vote: { userId: number; approved: boolean; note: string | null; edits: Record<string, unknown> | undefined },
    merge: (current: Record<string, unknown>) => Promise<Record<string, unknown>>,
    deliver: (row: { temporal_workflow_id: string; temporal_run_id: string }) => Promise<void>,
  ): Promise<VoteRefused | { refused: false; status: AgentActionStatus; approvals: number; ageSeconds: number }> {
    return this.sql.transaction(async (tx) => {
      const [row] = await tx.query<{
        status: AgentActionStatus;
        past: boolean;
        expires_at: Date | string;
        required: number;
        fields: Record<string, unknown>;
        temporal_workflow_id: string;
        temporal_run_id: string;
        age_seconds: number;
      }>(
        `select status, expires_at, coalesce(expires_at <= now(), false) as past, required, fields, temporal_workflow_id, temporal_run_id,
                floor(extract(epoch from (now() - created_at)))::int as age_seconds
           from agent_actions where action_id = ? and source = 'workflow' for update`,
        [actionId],
      );
      if (row!.status === 'pending' && row!.past) return { refused: true, status: 'expired', expires_at: row!.expires_at };
      if (row!.status !== 'pending') return { refused: true, status: row!.status as DecisionRefused['status'], expires_at: row!.expires_at };
      const [voted] = await tx.query('select 1 from agent_action_votes where action_id = ? and user_id = ?', [actionId, vote.userId]);
      if (voted) return { refused: true, status: 'voted', expires_at: row!.expires_at };
      const fields = vote.approved && vote.edits ? await merge(row!.fields) : row!.fields;
      await tx.query('insert into agent_action_votes (action_id, user_id, decision, note, fields) values (?, ?, ?, ?, ?)', [
        actionId,
        vote.userId,
        vote.approved ? 'approved' : 'rejected',
        vote.note,
        vote.approved && vote.edits ? JSON.stringify(vote.edits) : null,
      ]);
      const [{ approvals }] = (await tx.query<{ approvals: number }>(
        `select count(*)::int as approvals from agent_action_votes where action_id = ? and decision = 'approved'`,
        [actionId],
      )) as [{ approvals: number }];
      const final: AgentActionStatus | undefined = !vote.approved ? 'rejected' : approvals >= row!.required ? 'approved' : undefined;
      if (final) {
        await tx.query(`update agent_actions set status = ?, fields = ?, note = ?, decided_by = ?, decided_at = now() where action_id = ?`, [
          final,
          JSON.stringify(fields),
          vote.note,
          vote.userId,
          actionId,
        ]);
        await deliver(row!);
      } else if (fields !== row!.fields) {
        await tx.query('update agent_actions set fields = ? where action_id = ?', [JSON.stringify(fields), actionId]);
      }
      return { refused: false, status: final ?? 'pending', approvals, ageSeconds: row!.age_seconds };
    });
  }

  /** pending → expired (the run's timer fired); waits for a decision being stored. Answers whether this call expired it. */
  async expireWorkflow(actionId: string): Promise<boolean> {
    const rows = await this.sql.query(
      `update agent_actions set status = 'expired', decided_at = now() where action_id = ? and source = 'workflow' and status = 'pending' returning 1`,
      [actionId],
    );
    return rows.length > 0;
  }

  /** pending → cancelled: the run that asked was cancelled (or is gone). Answers whether this call ended it. */
  async cancelWorkflow(actionId: string, note: string): Promise<boolean> {
    const rows = await this.sql.query(
      `update agent_actions set status = 'cancelled', note = ?, decided_at = now() where action_id = ? and source = 'workflow' and status = 'pending' returning 1`,
      [note, actionId],
    );
    return rows.length > 0;
  }

  /**
   * pending → cancelled for the approvals whose run ended without settling them (terminated or
   * reset in Temporal: no timer of theirs will fire). Answers how many.
   */
  async cancelOrphaned(note: string): Promise<number> {
    const rows = await this.sql.query(
      `update agent_actions a set status = 'cancelled', note = ?, decided_at = now()
        where a.source = 'workflow' and a.status = 'pending'
          and exists (select 1 from executions x where x.id = a.execution_id and x.status <> 'running') returning 1`,
      [note],
    );
    return rows.length;
  }

  /** Adds approvers to a pending workflow approval (its escalation); answers how many were not approvers yet. */
  async addApprovers(actionId: string, userIds: number[], capabilities: string[]): Promise<number> {
    const [row] = await this.sql.query<{ added: number }>(
      `with before as (select approver_ids, approver_capabilities from agent_actions where action_id = ? and status = 'pending' for update),
            after as (update agent_actions a set escalated_at = now(),
                        approver_ids = array(select distinct x from unnest(b.approver_ids || ?::int[]) x order by x),
                        approver_capabilities = array(select distinct x from unnest(b.approver_capabilities || ?::text[]) x order by x)
                        from before b where a.action_id = ? returning a.approver_ids, a.approver_capabilities)
       select coalesce((select cardinality(approver_ids) + cardinality(approver_capabilities) from after), 0)
            - coalesce((select cardinality(approver_ids) + cardinality(approver_capabilities) from before), 0) as added`,
      [actionId, userIds, capabilities, actionId],
    );
    return row?.added ?? 0;
  }

  /** A workflow approval; `share` waits for a decision being stored on it, so its status is the committed one. */
  async workflowAction(actionId: string, lock?: 'share', q: Queryable = this.sql): Promise<WorkflowActionRow | undefined> {
    const [row] = await q.query<WorkflowActionRow>(`${SELECT_WORKFLOW_ACTION}${lock ? ' for share of a' : ''}`, [actionId]);
    return row;
  }

  /** The decisions of the approvers of these actions, in the order they were taken. */
  async votesOf(actionIds: string[]): Promise<VoteRow[]> {
    if (!actionIds.length) return [];
    return this.sql.query<VoteRow>(
      `select v.action_id, v.user_id, u.login, v.decision, v.note, v.fields, v.decided_at from agent_action_votes v join users u on u.id = v.user_id
        where v.action_id = any(?::uuid[]) order by v.decided_at, v.user_id`,
      [actionIds],
    );
  }

  // --- reads -------------------------------------------------------------------------------

  /**
   * The stored action of exactly this call, for the tool activity. FOR SHARE waits for a decision
   * being taken on this row, so the status read is the committed outcome.
   */
  async forCall(input: {
    actionId: string;
    sessionId: string;
    turnId: string;
    call: AgentToolCall;
    editedArgs: Record<string, unknown> | undefined;
  }): Promise<CheckedActionRow | undefined> {
    const [row] = await this.sql.query<CheckedActionRow>(
      `select *, args = ?::jsonb as same_call, edited_args is not distinct from ?::jsonb as same_edit from agent_actions
        where action_id = ? and session_id = ? and turn_id = ? and tool_call_id = ? and tool = ? for share`,
      [
        JSON.stringify(input.call.args),
        input.editedArgs ? JSON.stringify(input.editedArgs) : null,
        input.actionId,
        input.sessionId,
        input.turnId,
        input.call.id,
        input.call.name,
      ],
    );
    return row;
  }

  /** The session's oldest pending action. */
  async pendingOf(sessionId: string): Promise<ActionRow | undefined> {
    const [pending] = await this.sql.query<ActionRow>(`select * from agent_actions where session_id = ? and status = 'pending' order by created_at limit 1`, [
      sessionId,
    ]);
    return pending;
  }

  /** Pending actions of the whole service, of the agent's or the workflows' (a metric). */
  async countPending(source: 'agent' | 'workflow' = 'agent'): Promise<number> {
    const [row] = await this.sql.query<{ n: number }>(`select count(*)::int as n from agent_actions where status = 'pending' and source = ?`, [source]);
    return row!.n;
  }

  /** An action of either source: an agent's with its session's owner and policy, or a workflow's approval. */
  async withSession(actionId: string): Promise<ActionWithSession | WorkflowActionRow | undefined> {
    const [row] = await this.sql.query<ActionWithSession | WorkflowActionRow>(`${SELECT_ACTION} where a.action_id = ?`, [actionId]);
    return row;
  }

  /** One page of a session's audit trail, oldest first. */
  async sessionPage(sessionId: string, page: number, perPage: number): Promise<{ rows: ActionWithSession[]; total: number }> {
    const [{ total }] = (await this.sql.query<{ total: string }>('select count(*) as total from agent_actions where session_id = ?', [sessionId])) as [
      { total: string },
    ];
    const rows = await this.sql.query<ActionWithSession>(`${SELECT_ACTION} where a.session_id = ? order by a.created_at, a.action_id limit ? offset ?`, [
      sessionId,
      perPage,
      (page - 1) * perPage,
    ]);
    return { rows, total: Number(total) };
  }

  /**
   * One page of the actions `principal` may decide or has decided, newest first: the agent's under
   * their session's policy, and the workflows' approvals naming the principal (or a capability
   * they hold) as an approver, unless it is their own run's and self-approval is off.
   */
  async inboxPage(
    principal: { id: number; approver: boolean; capabilities: string[] },
    filter: { status?: AgentActionStatus | undefined; source?: 'agent' | 'workflow' | undefined },
    page: number,
    perPage: number,
  ): Promise<{ rows: (ActionWithSession | WorkflowActionRow)[]; total: number }> {
    const where = [
      `((a.source = 'agent' and ((s.owner_id = ? and s.approval in ('owner', 'any')) or (?::boolean and s.owner_id <> ? and s.approval in ('others', 'any')) or a.decided_by = ?))
        or (a.source = 'workflow' and (((? = any(a.approver_ids) or a.approver_capabilities && ?::text[]) and (a.self_approval or not ? = any(a.acting_user_ids)))
            or exists (select 1 from agent_action_votes v where v.action_id = a.action_id and v.user_id = ?))))`,
    ];
    const { id } = principal;
    const args: unknown[] = [id, principal.approver, id, id, id, principal.capabilities, id, id];
    if (filter.status) {
      where.push('a.status = ?');
      args.push(filter.status);
    }
    if (filter.source) {
      where.push('a.source = ?');
      args.push(filter.source);
    }
    const clause = where.join(' and ');
    const [{ total }] = (await this.sql.query<{ total: string }>(
      `select count(*) as total from agent_actions a left join agent_sessions s on s.id = a.session_id where ${clause}`,
      args,
    )) as [{ total: string }];
    const rows = await this.sql.query<ActionWithSession | WorkflowActionRow>(
      `${SELECT_ACTION} where ${clause} order by a.created_at desc, a.action_id limit ? offset ?`,
      [...args, perPage, (page - 1) * perPage],
    );
    return { rows, total: Number(total) };
  }

  /** Actions of a session that expired between the turn before `turnId` and `turnId`. */
  async expiredBefore(sessionId: string, turnId: string): Promise<{ action_id: string; tool: string; summary: string; decided_at: Date | string }[]> {
    return this.sql.query<{ action_id: string; tool: string; summary: string; decided_at: Date | string }>(
      `with this_turn as (select created_at from agent_messages where session_id = ? and step_key = ?),
            previous as (select max(m.created_at) as at from agent_messages m, this_turn t where m.session_id = ? and m.role = 'user' and m.created_at < t.created_at)
       select a.action_id, a.tool, a.summary, a.decided_at from agent_actions a, this_turn t, previous p
        where a.session_id = ? and a.status = 'expired' and a.decided_at < t.created_at and a.decided_at > coalesce(p.at, '-infinity')
        order by a.decided_at`,
      [sessionId, `user:${turnId}`, sessionId, sessionId],
      { prepared: true },
    );
  }
}

/** Narrows a decision's answer: true when the store refused it. */
export const isRefused = (value: unknown): value is DecisionRefused =>
  typeof value === 'object' && value !== null && (value as DecisionRefused).refused === true;
