import { Migration } from '@mikro-orm/migrations';

/**
 * Isolation between the members of a team:
 * - rate limits become sliding windows: per bucket, the times of the requests admitted within the
 *   window replace fixed-window counters (which let a client send twice its limit across a window
 *   boundary);
 * - a run records whose rights it carries (`acting_user_ids`: the workflow's owner, the author of
 *   the version that runs, whoever started it, and for a child run its parent's), and where it sits
 *   in a tree of run_workflow children (`parent_execution_id`, `root_execution_id`, `depth`), with
 *   the child runs each tree started (`execution_child_runs`, its budget);
 * - workflows and their versions record who wrote them (`updated_by`, `created_by`);
 * - connections are shared with named users (`shared_with`);
 * - a run records the OpenTelemetry trace it belongs to (`trace_id`).
 */
export class Migration20261124000100Isolation extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create unlogged table rate_limit_windows (
      bucket varchar(300) primary key,
      stamps bigint[] not null,
      admitted int not null,
      requested int not null,
      max_hits int not null,
      window_ms bigint not null,
      now_ms bigint not null)`);
    this.addSql('drop table if exists rate_limit_counters');

    this.addSql('alter table workflows add column updated_by int null references users(id) on delete set null');
    this.addSql('update workflows set updated_by = owner_id');
    this.addSql('alter table workflow_versions add column created_by int null references users(id) on delete set null');
    this.addSql('update workflow_versions v set created_by = w.owner_id from workflows w where w.id = v.workflow_id');
    // Child runs nest their Temporal workflow ids (parent id, a dash, the node id) up to the depth limit.
    this.addSql(`alter table executions
      alter column temporal_workflow_id type varchar(1000),
      add column acting_user_ids int[] null,
      add column parent_execution_id bigint null references executions(id) on delete set null,
      add column root_execution_id bigint null references executions(id) on delete set null,
      add column depth int not null default 0,
      add column trace_id varchar(32) null`);
    this.addSql(`create table execution_child_runs (
      root_execution_id bigint not null references executions(id) on delete cascade,
      temporal_workflow_id varchar(1000) not null,
      claimed_at timestamptz not null default now(),
      primary key (root_execution_id, temporal_workflow_id))`);
    this.addSql(`alter table connections add column shared_with int[] not null default '{}'`);
  }

  override async down(): Promise<void> {
    this.addSql('alter table connections drop column shared_with');
    this.addSql('drop table if exists execution_child_runs');
    this.addSql(
      `alter table executions drop column acting_user_ids, drop column parent_execution_id, drop column root_execution_id, drop column depth, drop column trace_id`,
    );
    this.addSql('alter table workflow_versions drop column created_by');
    this.addSql('alter table workflows drop column updated_by');
    this.addSql(`create unlogged table rate_limit_counters (
      bucket varchar(200) not null,
      window_start timestamptz not null,
      hits int not null,
      primary key (bucket, window_start))`);
    this.addSql('drop table if exists rate_limit_windows');
  }
}
