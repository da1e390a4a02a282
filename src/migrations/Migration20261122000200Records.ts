import { Migration } from '@mikro-orm/migrations';

/**
 * The entity catalogue and the schema that holds one table per user-defined entity. Record
 * tables themselves are created and altered at run time by the entity service (its reconciler),
 * not by migrations.
 */
export class Migration20261122000200Records extends Migration {
  override async up(): Promise<void> {
    this.addSql('create schema if not exists records');
    this.addSql(`create table entities (
      slug varchar(40) primary key,
      name varchar(200) not null,
      definition jsonb not null,
      field_order text[] not null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists entities');
    this.addSql('drop schema if exists records cascade');
  }
}
