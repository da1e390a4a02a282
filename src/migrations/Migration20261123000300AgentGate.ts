import { Migration } from '@mikro-orm/migrations';

/**
 * The gate beyond approve/reject: per-session approval policy, gate expiry and budget; actions
 * that expire, keep the approver's edited arguments beside the model's and the tool's outcome;
 * an audit trail that cannot be rewritten.
 */
export class Migration20261123000300AgentGate extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table agent_sessions
      add column approval varchar(6) not null default 'owner' check (approval in ('owner', 'others', 'any')),
      add column gate_ttl_s int null check (gate_ttl_s > 0),
      add column budget_usd numeric(14, 6) null check (budget_usd >= 0)`);
    this.addSql(`alter table agent_actions drop constraint if exists agent_actions_status_check`);
    this.addSql(`alter table agent_actions
      add constraint agent_actions_status_check check (status in ('pending', 'approved', 'rejected', 'expired')),
      add column edited_args jsonb null,
      add column expires_at timestamptz null,
      add column outcome jsonb null,
      add column outcome_at timestamptz null`);
    // The inbox: pending actions across sessions, newest first, and what a user decided.
    this.addSql(`create index agent_actions_status_idx on agent_actions (status, created_at desc)`);
    this.addSql(`create index agent_actions_decided_by_idx on agent_actions (decided_by, created_at desc)`);
    // The audit trail is append-only: what the model asked never changes, a decision (or expiry) is
    // taken once, and the tool's outcome and start are written once. Enforced here so that no code
    // path (nor an operator's stray UPDATE) can rewrite it.
    this.addSql(`create or replace function agent_actions_append_only() returns trigger language plpgsql as $$
      begin
        if new.action_id is distinct from old.action_id or new.session_id is distinct from old.session_id
           or new.turn_id is distinct from old.turn_id or new.tool_call_id is distinct from old.tool_call_id
           or new.tool is distinct from old.tool or new.args is distinct from old.args
           or new.summary is distinct from old.summary or new.created_at is distinct from old.created_at
           or new.expires_at is distinct from old.expires_at then
          raise exception 'agent action % is append-only: the request cannot change', old.action_id using errcode = 'check_violation';
        end if;
        if old.status <> 'pending' and (new.status is distinct from old.status or new.note is distinct from old.note
           or new.decided_by is distinct from old.decided_by or new.decided_at is distinct from old.decided_at
           or new.edited_args is distinct from old.edited_args) then
          raise exception 'agent action % was already %: its decision cannot change', old.action_id, old.status using errcode = 'check_violation';
        end if;
        if (old.outcome is not null and new.outcome is distinct from old.outcome)
           or (old.outcome_at is not null and new.outcome_at is distinct from old.outcome_at)
           or (old.started_at is not null and new.started_at is distinct from old.started_at) then
          raise exception 'agent action %: its outcome is written once', old.action_id using errcode = 'check_violation';
        end if;
        return new;
      end $$`);
    this.addSql(`create trigger agent_actions_append_only before update on agent_actions for each row execute function agent_actions_append_only()`);
    // Nor can the trail be deleted: not a row, not by removing its session, and a user who decided
    // actions stays (their id is what the trail says decided; a cascade would rewrite it to null).
    this.addSql(`create or replace function agent_actions_keep() returns trigger language plpgsql as $$
      begin
        raise exception 'agent action % is part of the audit trail and cannot be deleted', old.action_id using errcode = 'check_violation';
      end $$`);
    this.addSql(`create trigger agent_actions_keep before delete on agent_actions for each row execute function agent_actions_keep()`);
    this.addSql(`alter table agent_actions drop constraint agent_actions_decided_by_fkey,
      add constraint agent_actions_decided_by_fkey foreign key (decided_by) references users(id) on delete restrict`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table agent_actions drop constraint agent_actions_decided_by_fkey,
      add constraint agent_actions_decided_by_fkey foreign key (decided_by) references users(id) on delete set null`);
    this.addSql('drop trigger if exists agent_actions_keep on agent_actions');
    this.addSql('drop function if exists agent_actions_keep()');
    this.addSql('drop trigger if exists agent_actions_append_only on agent_actions');
    this.addSql('drop function if exists agent_actions_append_only()');
    this.addSql('drop index if exists agent_actions_decided_by_idx');
    this.addSql('drop index if exists agent_actions_status_idx');
    this.addSql(`update agent_actions set status = 'rejected' where status = 'expired'`);
    this.addSql(`alter table agent_actions drop constraint agent_actions_status_check,
      drop column edited_args, drop column expires_at, drop column outcome, drop column outcome_at,
      add constraint agent_actions_status_check check (status in ('pending', 'approved', 'rejected'))`);
    this.addSql('alter table agent_sessions drop column approval, drop column gate_ttl_s, drop column budget_usd');
  }
}
