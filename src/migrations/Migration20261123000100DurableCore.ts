import { Migration } from '@mikro-orm/migrations';

export class Migration20261123000100DurableCore extends Migration {
  override async up(): Promise<void> {
    // A node in flight when its run was cancelled ends `cancelled`, not `running` forever.
    this.addSql('alter table execution_nodes drop constraint if exists execution_nodes_status_check');
    this.addSql(
      `alter table execution_nodes add constraint execution_nodes_status_check check (status in ('running', 'success', 'failed', 'skipped', 'cancelled'))`,
    );
    // Why a replay exists: the API's "replay of execution N from node X", or an operator's reason
    // given to a reset in the Temporal Web UI or CLI.
    this.addSql('alter table executions add column replay_reason text null');
    // Retry-safe starts: a key names one execution per workflow; `request` is what to send
    // Temporal again when the first attempt's start was never confirmed.
    this.addSql(`create table idempotency_keys (
      workflow_id int not null references workflows(id) on delete cascade,
      key varchar(255) not null,
      fingerprint char(64) not null,
      execution_id bigint not null references executions(id) on delete cascade,
      request jsonb null,
      created_at timestamptz not null default now(),
      primary key (workflow_id, key))`);
    this.addSql('create index idempotency_keys_created_idx on idempotency_keys (created_at)');
    // One live application password per name and user, also when two requests race. Older
    // duplicates (possible before this index) are renamed, not revoked.
    this.addSql(`update app_passwords a set name = left(a.name, 80) || ' (' || a.id || ')'
      where a.revoked_at is null and exists (
        select 1 from app_passwords b where b.user_id = a.user_id and b.name = a.name and b.revoked_at is null and b.id > a.id)`);
    this.addSql('create unique index app_passwords_name_idx on app_passwords (user_id, name) where revoked_at is null');
  }

  override async down(): Promise<void> {
    this.addSql('drop index if exists app_passwords_name_idx');
    this.addSql('drop table if exists idempotency_keys');
    this.addSql('alter table executions drop column if exists replay_reason');
    this.addSql(`update execution_nodes set status = 'failed' where status = 'cancelled'`);
    this.addSql('alter table execution_nodes drop constraint if exists execution_nodes_status_check');
    this.addSql(`alter table execution_nodes add constraint execution_nodes_status_check check (status in ('running', 'success', 'failed', 'skipped'))`);
  }
}
