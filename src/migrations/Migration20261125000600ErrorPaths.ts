import { Migration } from '@mikro-orm/migrations';

/**
 * Error paths and what users read of a run:
 * - a workflow may name an error workflow (`error_workflow_id`), started when one of its runs fails;
 * - the handler's execution names the failed one (`triggered_by_execution_id`), at most one handler
 *   per failed execution (the unique index makes its start idempotent);
 * - a node's timeline entry keeps the last attempt's time (`last_attempt_ms`) beside its whole
 *   time from the first attempt's start (`duration_ms`).
 */
export class Migration20261125000600ErrorPaths extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table workflows add column error_workflow_id int null references workflows(id) on delete set null');
    this.addSql('alter table executions add column triggered_by_execution_id bigint null references executions(id) on delete set null');
    this.addSql(`create unique index executions_error_handler_idx on executions (triggered_by_execution_id) where trigger = 'error'`);
    this.addSql('alter table execution_nodes add column last_attempt_ms int null');
  }

  override async down(): Promise<void> {
    this.addSql('alter table execution_nodes drop column last_attempt_ms');
    this.addSql('drop index if exists executions_error_handler_idx');
    this.addSql('alter table executions drop column triggered_by_execution_id');
    this.addSql('alter table workflows drop column error_workflow_id');
  }
}
