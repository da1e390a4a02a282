import { LockMode, type FilterQuery } from '@mikro-orm/core';
import type { EntityData } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Queryable } from '../db/sql.js';
import { License, LicenseActivation, type ActivationStatus } from './license.entities.js';
import { enqueueLicenseEvent } from './license-webhook.store.js';
import type { LicenseEvent } from './license-webhooks.schemas.js';

/** A licence key in its stored form: a reference id, or the SHA-256 of a token. */
export type LicenseKeyFilter = { referenceId: string } | { tokenHash: string };

/**
 * One transaction on licences and their activations (MikroORM's unit of work): what it changes is
 * written when the work returns, together with the events' outbox rows; nothing when it throws.
 */
export class LicenseUnit {
  constructor(private readonly em: EntityManager) {}

  /** The licence under `for update`, held to the end of the transaction (activations are decided one after another). */
  lock(where: { id: number } | LicenseKeyFilter): Promise<License | null> {
    return this.em.findOne(License, where, { lockMode: LockMode.PESSIMISTIC_WRITE });
  }

  activation(license: License, siteFingerprint: string): Promise<LicenseActivation | null> {
    return this.em.findOne(LicenseActivation, { license, siteFingerprint });
  }

  /** The domains holding a slot of the licence, but for activation `except`. */
  async slotDomains(license: License, except?: string): Promise<Set<string>> {
    const others = await this.em.find(
      LicenseActivation,
      { license, status: 'active', countsSlot: true, ...(except ? { id: { $ne: except } } : {}) },
      { fields: ['domain'] },
    );
    return new Set(others.map((a) => a.domain));
  }

  /** Active activations of the licence on `domain`, but for activation `except`. */
  activeOnDomain(license: License, domain: string, except: string): Promise<number> {
    return this.em.count(LicenseActivation, { license, domain, status: 'active', id: { $ne: except } });
  }

  /** Changes fields of a licence or an activation read in this unit. */
  change<T extends License | LicenseActivation>(entity: T, fields: EntityData<T>): void {
    this.em.assign(entity, fields as never);
  }

  addActivation(fields: EntityData<LicenseActivation> & { id: string; license: License }): LicenseActivation {
    return this.em.create(LicenseActivation, fields as never);
  }

  /** Writes what changed so far (the transaction commits when the work returns). */
  async save(): Promise<void> {
    await this.em.flush();
  }

  /** The event's deliveries, written in this transaction; answers their ids. */
  enqueue(type: LicenseEvent, data: Record<string, unknown>): Promise<string[]> {
    return enqueueLicenseEvent(this.em, type, data);
  }
}

/**
 * The one owner of `licenses` and `license_activations`. They are MikroORM entities, so every
 * write goes through the entities; the public verify endpoint, which every site calls on a
 * schedule, reads through one prepared statement of the Sql helper. Nothing else in the service
 * writes these tables.
 */
export class LicenseStore {
  constructor(
    private readonly em: EntityManager,
    private readonly sql: Queryable,
  ) {}

  /** Runs `work` in one transaction (retried work starts from a fresh unit). */
  transaction<T>(work: (unit: LicenseUnit) => Promise<T>): Promise<T> {
    return this.em.fork().transactional((em) => work(new LicenseUnit(em)));
  }

  async insert(fields: EntityData<License>): Promise<License> {
    const em = this.em.fork();
    const license = em.create(License, fields as never);
    await em.flush();
    return license;
  }

  get(where: { id: number } | LicenseKeyFilter): Promise<License | null> {
    return this.em.fork().findOne(License, where);
  }

  exists(id: number): Promise<number> {
    return this.em.fork().count(License, { id });
  }

  page(where: FilterQuery<License>, page: number, perPage: number): Promise<[License[], number]> {
    return this.em.fork().findAndCount(License, where, { orderBy: { id: 'desc' }, limit: perPage, offset: (page - 1) * perPage });
  }

  activationPage(licenseId: number, status: ActivationStatus | undefined, page: number, perPage: number): Promise<[LicenseActivation[], number]> {
    return this.em
      .fork()
      .findAndCount(
        LicenseActivation,
        { license: licenseId, ...(status ? { status } : {}) },
        { orderBy: { activatedAt: 'desc', id: 'asc' }, limit: perPage, offset: (page - 1) * perPage },
      );
  }

  /** Distinct domains holding a slot, per licence. */
  async activeDomains(licenseIds: number[]): Promise<Map<number, number>> {
    const counts = new Map<number, number>();
    if (!licenseIds.length) return counts;
    const rows = await this.sql.query<{ license_id: number; domains: string }>(
      `select license_id, count(distinct domain) as domains from license_activations
          where license_id = any(?) and status = 'active' and counts_slot
          group by license_id`,
      [licenseIds],
    );
    for (const row of rows) counts.set(row.license_id, Number(row.domains));
    return counts;
  }

  /** What verify answers, in one indexed, prepared statement. */
  async forVerify(key: LicenseKeyFilter, siteFingerprint: string | null, domain: string | null) {
    const [column, value] = 'referenceId' in key ? ['reference_id', key.referenceId] : ['token_hash', key.tokenHash];
    const rows = await this.sql.query<{
      status: string;
      expires_at: Date | string | null;
      domain_limit: number;
      product_slug: string;
      product_name: string;
      site_match: boolean;
    }>(
      `select l.status, l.expires_at, l.domain_limit, l.product_slug, l.product_name,
              exists (select 1 from license_activations a
                       where a.license_id = l.id and a.site_fingerprint = $1 and a.status = 'active'
                         and (case when $3::text is null then a.counts_slot else a.domain = $3 end)) as site_match
         from licenses l where l.${column} = $2`,
      [siteFingerprint, value, domain],
      { prepared: true },
    );
    return rows[0];
  }
}
