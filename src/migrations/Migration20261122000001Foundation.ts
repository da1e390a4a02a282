import { Migration } from '@mikro-orm/migrations';

export class Migration20261122000001Foundation extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table users (
      id serial primary key,
      login varchar(60) not null unique,
      email varchar(255) null,
      password_hash varchar(255) not null,
      role varchar(30) not null check (role in ('administrator', 'editor', 'subscriber')),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
    this.addSql(`create table app_passwords (
      id serial primary key,
      user_id int not null references users(id) on delete cascade,
      name varchar(100) not null,
      secret_hash varchar(255) not null,
      created_at timestamptz not null default now(),
      last_used_at timestamptz null,
      revoked_at timestamptz null)`);
    this.addSql(`create index app_passwords_user_idx on app_passwords (user_id) where revoked_at is null`);
    this.addSql(`create table sessions (
      id varchar(64) primary key,
      user_id int not null references users(id) on delete cascade,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null,
      revoked_at timestamptz null)`);
    this.addSql(`create index sessions_user_idx on sessions (user_id)`);
    // Fixed-window counters shared by every API process (login failures, licence endpoints).
    this.addSql(`create unlogged table rate_limit_counters (
      bucket varchar(200) not null,
      window_start timestamptz not null,
      hits int not null,
      primary key (bucket, window_start))`);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists rate_limit_counters');
    this.addSql('drop table if exists sessions');
    this.addSql('drop table if exists app_passwords');
    this.addSql('drop table if exists users');
  }
}
