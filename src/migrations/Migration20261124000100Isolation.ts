import { Migration } from '@mikro-orm/migrations';

/**
 * Rate limits become sliding windows: per bucket, the times of the requests admitted within the
 * window replace fixed-window counters (which let a client send twice its limit across a window
 * boundary).
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
  }

  override async down(): Promise<void> {
    this.addSql(`create unlogged table rate_limit_counters (
      bucket varchar(200) not null,
      window_start timestamptz not null,
      hits int not null,
      primary key (bucket, window_start))`);
    this.addSql('drop table if exists rate_limit_windows');
  }
}
