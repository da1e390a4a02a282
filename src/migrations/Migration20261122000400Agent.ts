import { Migration } from '@mikro-orm/migrations';

export class Migration20261122000400Agent extends Migration {
  override async up(): Promise<void> {
    // The session row holds what the model activity needs to rebuild a request (provider, model,
    // system prompt); totals are summed from the messages' telemetry. The conversation itself lives in agent_messages, so the
    // Temporal workflow carries only ids and its event history stays small.
    this.addSql(`create table agent_sessions (
      id uuid primary key,
      owner_id int not null references users(id) on delete cascade,
      provider_id int not null,
      provider_type varchar(20) not null,
      model varchar(200) not null,
      system_prompt text null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
    this.addSql(`create index agent_sessions_owner_idx on agent_sessions (owner_id)`);
    // step_key makes every write of an activity idempotent: a retried activity (a worker restart)
    // finds its row already there instead of appending a second copy.
    this.addSql(`create table agent_messages (
      id bigserial primary key,
      session_id uuid not null references agent_sessions(id) on delete cascade,
      step_key varchar(200) not null,
      turn_id uuid not null,
      role varchar(12) not null check (role in ('user', 'assistant', 'tool', 'decision')),
      content text not null default '',
      tool_calls jsonb null,
      tool_call_id varchar(200) null,
      tool_name varchar(60) null,
      args jsonb null,
      result_summary text null,
      decision jsonb null,
      telemetry jsonb null,
      created_at timestamptz not null default now())`);
    this.addSql(`create unique index agent_messages_step_idx on agent_messages (session_id, step_key)`);
    this.addSql(`create table agent_actions (
      action_id uuid primary key,
      session_id uuid not null references agent_sessions(id) on delete cascade,
      turn_id uuid not null,
      tool_call_id varchar(200) not null,
      tool varchar(60) not null,
      args jsonb not null,
      summary text not null,
      status varchar(10) not null check (status in ('pending', 'approved', 'rejected')),
      note text null,
      decided_by int null references users(id) on delete set null,
      decided_at timestamptz null,
      started_at timestamptz null,
      created_at timestamptz not null default now())`);
    this.addSql(`create index agent_actions_session_idx on agent_actions (session_id, status)`);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists agent_actions');
    this.addSql('drop table if exists agent_messages');
    this.addSql('drop table if exists agent_sessions');
  }
}
