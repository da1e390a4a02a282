import { Migration } from '@mikro-orm/migrations';

/**
 * Every change to the workflows table (and to a login, which a workflow's row shows as its
 * owner's) is announced on `svc_workflows` at commit, with an empty payload ("any workflow may
 * have changed"), whoever makes it: the service, a workflow file applied, a cascade, an operator's
 * SQL. Each API process keeps the webhook's lookup of a workflow in memory only while it hears
 * these (src/workflow-definitions/workflow.service.ts). One announcement per statement; PostgreSQL
 * delivers identical ones of a transaction once.
 */
export class Migration20261129000100WorkflowChanges extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create function svc_workflows_changed() returns trigger language plpgsql as $$
      begin
        perform pg_notify('svc_workflows', '');
        return null;
      end
    $$`);
    this.addSql(
      'create trigger workflows_announce_change after insert or update or delete or truncate on workflows for each statement execute function svc_workflows_changed()',
    );
    this.addSql('create trigger users_announce_login_change after update of login on users for each statement execute function svc_workflows_changed()');
  }

  override async down(): Promise<void> {
    this.addSql('drop trigger users_announce_login_change on users');
    this.addSql('drop trigger workflows_announce_change on workflows');
    this.addSql('drop function svc_workflows_changed()');
  }
}
