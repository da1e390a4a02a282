import { Migration } from '@mikro-orm/migrations';

/**
 * Who chose a workflow's error workflow (`error_workflow_chosen_by`): a failed run's error message
 * and data reach the handler only when that person, or every person the handler acts for, holds
 * the failed run's rights. Unknown for error workflows chosen before (null): then only the
 * handler's people count.
 */
export class Migration20261125001000ErrorWorkflowChooser extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table workflows add column error_workflow_chosen_by int null references users(id) on delete set null');
  }

  override async down(): Promise<void> {
    this.addSql('alter table workflows drop column error_workflow_chosen_by');
  }
}
