import { Migration } from '@mikro-orm/migrations';

/**
 * Waiting inside a run:
 * - events (`workflow_events`), kept for the longest lookback a wait may have, and the waits of
 *   runs for them (`workflow_event_waits`): an event and a wait meet under one lock on their
 *   name and key, whichever comes first;
 * - approvals of workflow runs on the agent's gate: `agent_actions` holds them beside the agent's
 *   actions (`source`), with the run that asked, the approvers, the editable fields and how many
 *   distinct approvals it needs; each approver's decision is a row of `agent_action_votes`, as
 *   append-only as the action itself. An action whose run was cancelled ends `cancelled`.
 */
export class Migration20261125000500Waits extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table workflow_events (
      id bigserial primary key,
      name varchar(100) not null,
      key varchar(200) not null,
      data jsonb not null,
      sender_ids int[] not null,
      origin varchar(200) null unique,
      delivered_to bigint[] not null default '{}',
      sent_at timestamptz not null default now())`);
    this.addSql('create index workflow_events_match_idx on workflow_events (name, key, sent_at desc)');
    this.addSql('create index workflow_events_sent_idx on workflow_events (sent_at)');
    this.addSql(`create table workflow_event_waits (
      id uuid primary key default gen_random_uuid(),
      execution_id bigint not null references executions(id) on delete cascade,
      workflow_id int not null,
      node_id varchar(64) not null,
      temporal_workflow_id varchar(1000) not null,
      temporal_run_id varchar(64) not null,
      name varchar(100) not null,
      key varchar(200) not null,
      status varchar(10) not null default 'waiting' check (status in ('waiting', 'received', 'timed_out', 'cancelled')),
      event_id bigint null references workflow_events(id) on delete set null,
      event jsonb null,
      created_at timestamptz not null default now(),
      resolved_at timestamptz null,
      unique (temporal_run_id, node_id))`);
    this.addSql(`create index workflow_event_waits_waiting_idx on workflow_event_waits (name, key) where status = 'waiting'`);
    this.addSql('create index workflow_event_waits_lineage_idx on workflow_event_waits (temporal_workflow_id)');

    this.addSql(`alter table agent_actions drop constraint agent_actions_status_check`);
    this.addSql(`alter table agent_actions
      alter column session_id drop not null,
      alter column turn_id drop not null,
      alter column tool_call_id drop not null,
      alter column tool drop not null,
      alter column args drop not null,
      add constraint agent_actions_status_check check (status in ('pending', 'approved', 'rejected', 'expired', 'cancelled')),
      add column source varchar(8) not null default 'agent' check (source in ('agent', 'workflow')),
      add column execution_id bigint null,
      add column workflow_id int null,
      add column node_id varchar(64) null,
      add column temporal_workflow_id varchar(1000) null,
      add column temporal_run_id varchar(64) null,
      add column requested_by int null,
      add column details jsonb null,
      add column fields jsonb null,
      add column editable jsonb null,
      add column required int null check (required between 1 and 20),
      add column self_approval boolean null,
      add column acting_user_ids int[] null,
      add column approver_ids int[] null,
      add column approver_capabilities text[] null,
      add column escalated_at timestamptz null`);
    this.addSql(`alter table agent_actions add constraint agent_actions_source_shape check (
      (source = 'agent' and session_id is not null and turn_id is not null and tool_call_id is not null and tool is not null and args is not null)
      or (source = 'workflow' and execution_id is not null and workflow_id is not null and node_id is not null and temporal_workflow_id is not null
          and temporal_run_id is not null and requested_by is not null and required is not null and self_approval is not null
          and acting_user_ids is not null and approver_ids is not null and approver_capabilities is not null and fields is not null and expires_at is not null))`);
    // A run asks once per approval node: its retried first step finds its action.
    this.addSql(`create unique index agent_actions_workflow_node_idx on agent_actions (temporal_run_id, node_id) where source = 'workflow'`);
    this.addSql(`create index agent_actions_execution_idx on agent_actions (execution_id) where execution_id is not null`);
    this.addSql(`create table agent_action_votes (
      action_id uuid not null references agent_actions(action_id),
      user_id int not null references users(id) on delete restrict,
      decision varchar(8) not null check (decision in ('approved', 'rejected')),
      note text null,
      fields jsonb null,
      decided_at timestamptz not null default now(),
      primary key (action_id, user_id))`);
    this.addSql(`create index agent_action_votes_user_idx on agent_action_votes (user_id)`);
    // What the model (or the run) asked never changes; the approvers may grow and the fields be
    // edited only while the action is pending; afterwards nothing of its decision changes.
    this.addSql(`create or replace function agent_actions_append_only() returns trigger language plpgsql as $$
      begin
        if new.action_id is distinct from old.action_id or new.session_id is distinct from old.session_id
           or new.turn_id is distinct from old.turn_id or new.tool_call_id is distinct from old.tool_call_id
           or new.tool is distinct from old.tool or new.args is distinct from old.args
           or new.summary is distinct from old.summary or new.created_at is distinct from old.created_at
           or new.expires_at is distinct from old.expires_at or new.source is distinct from old.source
           or new.execution_id is distinct from old.execution_id or new.workflow_id is distinct from old.workflow_id
           or new.node_id is distinct from old.node_id or new.temporal_workflow_id is distinct from old.temporal_workflow_id
           or new.temporal_run_id is distinct from old.temporal_run_id or new.requested_by is distinct from old.requested_by
           or new.details is distinct from old.details or new.editable is distinct from old.editable
           or new.required is distinct from old.required or new.self_approval is distinct from old.self_approval
           or new.acting_user_ids is distinct from old.acting_user_ids then
          raise exception 'agent action % is append-only: the request cannot change', old.action_id using errcode = 'check_violation';
        end if;
        if old.status <> 'pending' and (new.status is distinct from old.status or new.note is distinct from old.note
           or new.decided_by is distinct from old.decided_by or new.decided_at is distinct from old.decided_at
           or new.edited_args is distinct from old.edited_args or new.fields is distinct from old.fields
           or new.approver_ids is distinct from old.approver_ids or new.approver_capabilities is distinct from old.approver_capabilities
           or new.escalated_at is distinct from old.escalated_at) then
          raise exception 'agent action % was already %: its decision cannot change', old.action_id, old.status using errcode = 'check_violation';
        end if;
        if (old.outcome is not null and new.outcome is distinct from old.outcome)
           or (old.outcome_at is not null and new.outcome_at is distinct from old.outcome_at)
           or (old.started_at is not null and new.started_at is distinct from old.started_at) then
          raise exception 'agent action %: its outcome is written once', old.action_id using errcode = 'check_violation';
        end if;
        return new;
      end $$`);
    this.addSql(`create or replace function agent_action_votes_keep() returns trigger language plpgsql as $$
      begin
        raise exception 'a decision on agent action % is part of the audit trail and cannot change', old.action_id using errcode = 'check_violation';
      end $$`);
    this.addSql(`create trigger agent_action_votes_keep before update or delete on agent_action_votes for each row execute function agent_action_votes_keep()`);
  }

  override async down(): Promise<void> {
    this.addSql('drop trigger if exists agent_action_votes_keep on agent_action_votes');
    this.addSql('drop function if exists agent_action_votes_keep()');
    this.addSql('drop table if exists agent_action_votes');
    // The workflow approvals go with their columns (the audit trail's keep trigger is lifted for it).
    this.addSql('alter table agent_actions disable trigger agent_actions_keep');
    this.addSql(`delete from agent_actions where source = 'workflow'`);
    this.addSql('alter table agent_actions enable trigger agent_actions_keep');
    this.addSql('alter table agent_actions disable trigger agent_actions_append_only');
    this.addSql(`update agent_actions set status = 'rejected' where status = 'cancelled'`);
    this.addSql('alter table agent_actions enable trigger agent_actions_append_only');
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
    this.addSql('drop index if exists agent_actions_execution_idx');
    this.addSql('drop index if exists agent_actions_workflow_node_idx');
    this.addSql(`alter table agent_actions drop constraint agent_actions_source_shape, drop constraint agent_actions_status_check,
      drop column source, drop column execution_id, drop column workflow_id, drop column node_id, drop column temporal_workflow_id,
      drop column temporal_run_id, drop column requested_by, drop column details, drop column fields, drop column editable,
      drop column required, drop column self_approval, drop column acting_user_ids, drop column approver_ids,
      drop column approver_capabilities, drop column escalated_at,
      add constraint agent_actions_status_check check (status in ('pending', 'approved', 'rejected', 'expired'))`);
    this.addSql(`alter table agent_actions alter column session_id set not null, alter column turn_id set not null,
      alter column tool_call_id set not null, alter column tool set not null, alter column args set not null`);
    this.addSql('drop table if exists workflow_event_waits');
    this.addSql('drop table if exists workflow_events');
  }
}
