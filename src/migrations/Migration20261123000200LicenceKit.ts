import { Migration } from '@mikro-orm/migrations';

export class Migration20261123000200LicenceKit extends Migration {
  override async up(): Promise<void> {
    // Ed25519 keys that sign activate and verify answers. The private key is sealed under the
    // service key and dropped when the key is retired (a retired key never signs again); the
    // public key stays served until valid_until, so answers it signed keep verifying until they
    // expire. Each key after the first is endorsed by its predecessor, so a client that trusts an
    // old key can learn the new one.
    this.addSql(`create table license_signing_keys (
      key_id varchar(32) primary key,
      public_key varchar(64) not null,
      private_key_sealed text null,
      endorsed_by varchar(32) null references license_signing_keys(key_id),
      endorsement varchar(128) null,
      created_at timestamptz not null default now(),
      retired_at timestamptz null,
      valid_until timestamptz null,
      check ((retired_at is null) = (valid_until is null)))`);
    // At most one current key: concurrent first uses cannot create two.
    this.addSql(`create unique index license_signing_keys_current_idx on license_signing_keys ((true)) where retired_at is null`);

    this.addSql(`create table license_webhooks (
      id serial primary key,
      url varchar(2000) not null,
      events text[] not null,
      description varchar(500) null,
      active boolean not null default true,
      secret_sealed text not null,
      secret_hint varchar(8) not null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
    // Deliveries are written in the transaction of the licence change they report (an outbox),
    // so a committed change always has its deliveries; dispatched_at says a delivery workflow was
    // started, and the worker's sweep starts the ones a crash or an outage left behind.
    this.addSql(`create table license_webhook_deliveries (
      id varchar(40) primary key,
      webhook_id int not null references license_webhooks(id) on delete cascade,
      event_id varchar(40) not null,
      event varchar(40) not null,
      payload jsonb not null,
      status varchar(10) not null check (status in ('pending', 'delivered', 'failed')),
      attempts int not null default 0,
      last_status int null,
      last_error text null,
      created_at timestamptz not null default now(),
      dispatched_at timestamptz null,
      finished_at timestamptz null)`);
    this.addSql(`create index license_webhook_deliveries_webhook_idx on license_webhook_deliveries (webhook_id, created_at desc)`);
    this.addSql(`create index license_webhook_deliveries_undispatched_idx on license_webhook_deliveries (created_at) where dispatched_at is null`);
    // One row per attempt; a retried activity (a worker died mid-request) overwrites its own row.
    this.addSql(`create table license_webhook_attempts (
      delivery_id varchar(40) not null references license_webhook_deliveries(id) on delete cascade,
      attempt int not null,
      started_at timestamptz not null,
      duration_ms int not null,
      response_status int null,
      error text null,
      primary key (delivery_id, attempt))`);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists license_webhook_attempts');
    this.addSql('drop table if exists license_webhook_deliveries');
    this.addSql('drop table if exists license_webhooks');
    this.addSql('drop table if exists license_signing_keys');
  }
}
