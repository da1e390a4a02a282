import { Migration } from '@mikro-orm/migrations';

/**
 * Loops over items (the for_each node):
 * - `execution_items`: every item of every loop of a run, by index, inside the outer items it
 *   belongs to (`scope`, their indexes outermost first; `{}` for a loop of the graph itself): its
 *   input, its result (output or error), attempts and times, whether a replay reused it, and the
 *   outputs of its body's nodes too large to travel through Temporal's history (`refs`, by node);
 * - `execution_item_budgets`: how many items the loops of one execution have listed so far,
 *   checked against the budget of items per run.
 */
export class Migration20261125000700ForEach extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table execution_items (
      execution_id bigint not null references executions(id) on delete cascade,
      node_id varchar(64) not null,
      scope int[] not null default '{}',
      index int not null,
      status varchar(16) not null default 'pending' check (status in ('pending', 'success', 'failed', 'skipped', 'cancelled')),
      input jsonb null,
      output jsonb null,
      error jsonb null,
      refs jsonb null,
      attempts int not null default 0,
      started_at timestamptz null,
      finished_at timestamptz null,
      duration_ms int null,
      reused boolean not null default false,
      primary key (execution_id, node_id, scope, index))`);
    this.addSql(`create table execution_item_budgets (
      execution_id bigint primary key references executions(id) on delete cascade,
      items bigint not null)`);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists execution_item_budgets');
    this.addSql('drop table if exists execution_items');
  }
}
