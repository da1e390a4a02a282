import type { Sql } from '../db/sql.js';
import type { AgentActionStatus, AgentApprovalPolicy, AgentToolCall } from '../../workflows/defs.js';
import type { ActionRow } from './agent.store.js';

/**
 * The one owner of `agent_actions`: the side-effect gate's audit trail and its state machine.
 *
 *     pending ──approve──▶ approved ──(run once: started_at, then outcome)
 *        ├──────reject───▶ rejected
 *        └──────expire───▶ expired
 *
 * Only a pending action changes status, and only once: every transition below is one statement
 * guarded by `status = 'pending'` (a decision also by the deadline, under the row lock), so
 * whichever of a decision, the gate's timer and a restarted session comes first wins and the
 * others find the action decided. Nothing else in the service writes this table.
 */
export const ACTION_TRANSITIONS: Readonly<Record<AgentActionStatus, readonly AgentActionStatus[]>> = {
  pending: ['approved', 'rejected', 'expired'],
  approved: [],
  rejected: [],
  expired: [],
};

/** The stored action as the gate check reads it: the row, and whether it matches this call. */
export type CheckedActionRow = ActionRow & { same_call: boolean; same_edit: boolean };

/** An action with its session's owner and policy, as the inbox, the audit and the action endpoint read it. */
export interface ActionWithSession extends ActionRow {
  owner_id: number;
  owner_login: string;
  approval: AgentApprovalPolicy;
  decided_by_login: string | null;
  age_seconds: number;
}

/** Why a decision was not stored: the action had left `pending` (or its deadline had passed). */
export interface DecisionRefused {
  refused: true;
  /** `expired` also when the action is still pending but past its deadline. */
  status: Exclude<AgentActionStatus, 'pending'>;
  expires_at: Date | string | null;
}

const SELECT_ACTION = `select a.*, s.owner_id, o.login as owner_login, s.approval, d.login as decided_by_login,
         floor(extract(epoch from (now() - a.created_at)))::int as age_seconds
    from agent_actions a join agent_sessions s on s.id = a.session_id join users o on o.id = s.owner_id
    left join users d on d.id = a.decided_by`;

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

  /** Pending actions of the whole service (a metric). */
  async countPending(): Promise<number> {
    const [row] = await this.sql.query<{ n: number }>(`select count(*)::int as n from agent_actions where status = 'pending'`);
    return row!.n;
  }

  async withSession(actionId: string): Promise<ActionWithSession | undefined> {
    const [row] = await this.sql.query<ActionWithSession>(`${SELECT_ACTION} where a.action_id = ?`, [actionId]);
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

  /** One page of the actions `principalId` may decide or has decided, newest first. */
  async inboxPage(
    principal: { id: number; approver: boolean },
    status: AgentActionStatus | undefined,
    page: number,
    perPage: number,
  ): Promise<{ rows: ActionWithSession[]; total: number }> {
    const where = [
      `((s.owner_id = ? and s.approval in ('owner', 'any')) or (?::boolean and s.owner_id <> ? and s.approval in ('others', 'any')) or a.decided_by = ?)`,
    ];
    const args: unknown[] = [principal.id, principal.approver, principal.id, principal.id];
    if (status) {
      where.push('a.status = ?');
      args.push(status);
    }
    const clause = where.join(' and ');
    const [{ total }] = (await this.sql.query<{ total: string }>(
      `select count(*) as total from agent_actions a join agent_sessions s on s.id = a.session_id where ${clause}`,
      args,
    )) as [{ total: string }];
    const rows = await this.sql.query<ActionWithSession>(`${SELECT_ACTION} where ${clause} order by a.created_at desc, a.action_id limit ? offset ?`, [
      ...args,
      perPage,
      (page - 1) * perPage,
    ]);
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
    );
  }
}

/** Narrows a decision's answer: true when the store refused it. */
export const isRefused = (value: unknown): value is DecisionRefused =>
  typeof value === 'object' && value !== null && (value as DecisionRefused).refused === true;
