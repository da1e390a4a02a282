import { Migration } from '@mikro-orm/migrations';

export class Migration20261122000100Workflows extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table connections (
      id serial primary key,
      type varchar(30) not null check (type in ('http_bearer', 'http_basic', 'http_header', 'openai', 'anthropic')),
      label varchar(200) not null,
      cred_encrypted text not null,
      cred_preview varchar(40) not null,
      key_id varchar(16) not null,
      extra jsonb not null default '{}',
      owner_id int not null references users(id),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
    this.addSql(`create table workflows (
      id serial primary key,
      slug varchar(100) not null unique,
      title varchar(200) not null,
      description text not null default '',
      tags text[] not null default '{}',
      status varchar(20) not null default 'inactive' check (status in ('active', 'inactive', 'archived')),
      trigger_type varchar(20) not null,
      trigger jsonb not null,
      nodes jsonb not null,
      edges jsonb not null,
      node_count int not null,
      connection_ids int[] not null default '{}',
      version int not null default 1,
      webhook_secret varchar(100) null,
      owner_id int not null references users(id),
      shared_with int[] not null default '{}',
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      search tsvector generated always as (to_tsvector('english', title || ' ' || description)) stored)`);
    this.addSql('create index workflows_search_idx on workflows using gin (search)');
    this.addSql('create index workflows_tags_idx on workflows using gin (tags)');
    this.addSql('create index workflows_connections_idx on workflows using gin (connection_ids)');
    this.addSql('create index workflows_owner_idx on workflows (owner_id)');
    this.addSql(`create table workflow_versions (
      workflow_id int not null references workflows(id) on delete cascade,
      version int not null,
      definition jsonb not null,
      created_at timestamptz not null default now(),
      primary key (workflow_id, version))`);
    this.addSql(`create table executions (
      id bigserial primary key,
      workflow_id int not null references workflows(id) on delete cascade,
      workflow_version int not null,
      status varchar(20) not null check (status in ('running', 'success', 'failed', 'partial', 'cancelled')),
      trigger varchar(20) not null,
      trigger_payload jsonb null,
      started_at timestamptz not null default now(),
      finished_at timestamptz null,
      error jsonb null,
      last_output jsonb null,
      replay_of bigint null references executions(id) on delete set null,
      temporal_workflow_id varchar(255) not null,
      temporal_run_id varchar(100) null,
      triggered_by int null references users(id) on delete set null)`);
    this.addSql('create index executions_workflow_idx on executions (workflow_id, started_at desc)');
    this.addSql('create index executions_status_idx on executions (status, started_at desc)');
    this.addSql('create index executions_started_idx on executions (started_at desc)');
    this.addSql('create index executions_temporal_idx on executions (temporal_workflow_id)');
    this.addSql('create unique index executions_run_idx on executions (temporal_run_id) where temporal_run_id is not null');
    this.addSql(`create table execution_nodes (
      execution_id bigint not null references executions(id) on delete cascade,
      node_id varchar(64) not null,
      position bigint generated always as identity,
      node_type varchar(40) not null,
      status varchar(20) not null check (status in ('running', 'success', 'failed', 'skipped')),
      started_at timestamptz null,
      finished_at timestamptz null,
      duration_ms int null,
      attempts int not null default 0,
      input jsonb null,
      output jsonb null,
      error jsonb null,
      reused boolean not null default false,
      primary key (execution_id, node_id))`);
  }

  override async down(): Promise<void> {
    for (const table of ['execution_nodes', 'executions', 'workflow_versions', 'workflows', 'connections']) this.addSql(`drop table if exists ${table}`);
  }
}
