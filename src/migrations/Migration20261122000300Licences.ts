import { Migration } from '@mikro-orm/migrations';

export class Migration20261122000300Licences extends Migration {
  override async up(): Promise<void> {
    // The token is a bearer secret: only its SHA-256 is stored (a unique, indexed lookup key), so
    // a read of this table does not hand out working licence keys. token_hint (the last four
    // characters) lets support recognise a key a customer quotes.
    this.addSql(`create table licenses (
      id serial primary key,
      token_hash char(64) not null,
      token_hint varchar(8) not null,
      reference_id varchar(40) not null,
      status varchar(10) not null check (status in ('active', 'grace', 'expired', 'revoked', 'pending')),
      expires_at timestamptz null,
      domain_limit int not null check (domain_limit >= 1),
      product_slug varchar(100) not null,
      product_name varchar(200) not null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
    this.addSql(`create unique index licenses_token_hash_idx on licenses (token_hash)`);
    this.addSql(`create unique index licenses_reference_id_idx on licenses (reference_id)`);
    this.addSql(`create index licenses_product_status_idx on licenses (product_slug, status)`);
    this.addSql(`create table license_activations (
      id varchar(40) primary key,
      license_id int not null references licenses(id) on delete cascade,
      site_fingerprint varchar(128) not null,
      site_url varchar(2048) not null,
      domain varchar(255) not null,
      counts_slot boolean not null,
      status varchar(12) not null check (status in ('active', 'deactivated')),
      wp_version varchar(50) null,
      php_version varchar(50) null,
      plugin_version varchar(50) null,
      activated_at timestamptz not null default now(),
      deactivated_at timestamptz null,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now())`);
    // One row per site and licence: deactivating and activating again reuses it.
    this.addSql(`create unique index license_activations_fingerprint_idx on license_activations (license_id, site_fingerprint)`);
    this.addSql(`create index license_activations_active_domain_idx on license_activations (license_id, domain) where status = 'active'`);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists license_activations');
    this.addSql('drop table if exists licenses');
  }
}
