import { randomBytes } from 'node:crypto';
import type { FilterQuery } from '@mikro-orm/core';
import { randomToken, sha256 } from '../platform/crypto.js';
import { invalidRequest, notFound } from '../platform/errors.js';
import { siteDomain, type SiteDomain } from './domain.js';
import type { ActivationStatus, License, LicenseActivation } from './license.entities.js';
import { activationNotFound, alreadyDeactivated, licenseExpired, licenseInactive, licenseNotFound, siteLimitReached } from './license.errors.js';
import type { LicenseEvent } from './license-webhooks.schemas.js';
import type { LicenseKeyFilter, LicenseStore, LicenseUnit } from './license.store.js';
import type { SignedLicense } from './license.signature.js';
import {
  formatSpecTimestamp,
  type ActivationView,
  type CreateLicenseInput,
  type IssuedLicenseView,
  type LicenseFilter,
  type LicenseView,
  type UpdateLicenseInput,
} from './license.schemas.js';

/** What a site sends when it activates. Versions left out keep their recorded values. */
export interface SiteInput {
  siteUrl: string;
  siteFingerprint: string;
  wpVersion?: string | undefined;
  phpVersion?: string | undefined;
  pluginVersion?: string | undefined;
}

/** The versions a site reported, those it sent only: a missing one leaves the recorded one as it is. */
export function siteVersions(site: SiteInput): { wpVersion?: string; phpVersion?: string; pluginVersion?: string } {
  return {
    ...(site.wpVersion !== undefined ? { wpVersion: site.wpVersion } : {}),
    ...(site.phpVersion !== undefined ? { phpVersion: site.phpVersion } : {}),
    ...(site.pluginVersion !== undefined ? { pluginVersion: site.pluginVersion } : {}),
  };
}

/** What verify answers (and activate describes): the licence fields of a verify answer, exactly what is signed. */
export type VerifyResult = SignedLicense;

export interface Page<T> {
  items: T[];
  total: number;
  page: number;
  per_page: number;
}

const base32 = 'abcdefghijklmnopqrstuvwxyz234567';
/** `lic_` plus 20 base32 characters (100 random bits), drawn independently of the token. */
/**
 * A new licence key: 32 random bytes, base64url, drawn again while it starts with `-` or `_`, so a
 * key never reads as an option on a command line (`svc license show --key <key>`).
 */
function licenceToken(): string {
  for (;;) {
    const token = randomToken(32);
    if (/^[A-Za-z0-9]/.test(token)) return token;
  }
}

const referencePattern = /^lic_[a-z2-7]{20}$/;

function randomId(prefix: string): string {
  // 256 is a multiple of 32, so masking keeps every character equally likely.
  return prefix + Array.from(randomBytes(20), (b) => base32[b & 31]).join('');
}

/**
 * A key in the path is a reference id when it has that shape (tokens are 43 characters, so the
 * two forms never overlap) and otherwise a token, looked up by its SHA-256.
 */
function keyFilter(key: string): LicenseKeyFilter {
  return referencePattern.test(key) ? { referenceId: key } : { tokenHash: sha256(key) };
}

/**
 * Fails with the first reason that a licence cannot be used, in this order: past its `expires_at`
 * (403 `license_expired`), then a status other than active or grace (403 `license_inactive`). An
 * unknown key (404 `license_not_found`) is found before, a full licence (409
 * `site_limit_reached`) after.
 */
function assertUsable(license: { status: string; expiresAt?: Date | null }, now = new Date()): void {
  if (license.expiresAt && license.expiresAt.getTime() <= now.getTime()) throw licenseExpired(license.expiresAt);
  if (license.status !== 'active' && license.status !== 'grace') throw licenseInactive(license.status);
}

const iso = (date: Date | null | undefined) => (date ? date.toISOString() : null);

/** The licence as verify describes it, for a usable licence. */
const describe = (license: License, siteMatch: boolean): VerifyResult => ({
  license_status: 'active',
  expires_at: license.expiresAt ? formatSpecTimestamp(license.expiresAt) : null,
  domain_limit: license.domainLimit,
  site_match: siteMatch,
  product_slug: license.productSlug,
  product_name: license.productName,
});

/** The licence as webhook events show it. */
const eventLicense = (license: License) => ({
  id: license.id,
  reference_id: license.referenceId,
  status: license.status,
  expires_at: iso(license.expiresAt),
  domain_limit: license.domainLimit,
  product_slug: license.productSlug,
  product_name: license.productName,
});

/** What activate answers. */
type Activated = { activation_id: string; reactivated?: true; license: VerifyResult };
/** Writes an event's outbox rows in the caller's transaction. */
type Emit = (type: LicenseEvent, data: Record<string, unknown>) => Promise<void>;
/** Set when activate refused a site for the licence's domain limit (its event is written after the rollback). */
interface Refusal {
  refused?: { license: License; limit: number };
}

/** Starts the delivery of events whose deliveries a committed transaction wrote. */
export interface LicenseEventDispatcher {
  dispatch(deliveryIds: string[]): void;
}

function activationView(a: LicenseActivation): ActivationView {
  return {
    activation_id: a.id,
    site_url: a.siteUrl,
    domain: a.domain,
    site_fingerprint: a.siteFingerprint,
    counts_slot: a.countsSlot,
    status: a.status,
    wp_version: a.wpVersion ?? null,
    php_version: a.phpVersion ?? null,
    plugin_version: a.pluginVersion ?? null,
    activated_at: a.activatedAt.toISOString(),
    deactivated_at: iso(a.deactivatedAt),
    updated_at: a.updatedAt.toISOString(),
  };
}

/** Issuing and managing licences (CLI, management API) and the public activation protocol. */
export class LicenseService {
  /**
   * Without a dispatcher (the CLI) events are still written with the change; the worker's sweep
   * starts their delivery.
   */
  constructor(
    private readonly store: LicenseStore,
    private readonly events?: LicenseEventDispatcher,
  ) {}

  /** Runs a change and its events' outbox rows in one transaction, then starts the deliveries. */
  private async withEvents<T>(work: (unit: LicenseUnit, emit: Emit) => Promise<T>): Promise<T> {
    const deliveries: string[] = [];
    const result = await this.store.transaction(async (unit) => {
      deliveries.length = 0;
      return work(unit, async (type, data) => {
        deliveries.push(...(await unit.enqueue(type, data)));
      });
    });
    this.events?.dispatch(deliveries);
    return result;
  }

  // ---- issuing and management ------------------------------------------------------------

  async create(input: CreateLicenseInput): Promise<IssuedLicenseView> {
    const token = licenceToken();
    const license = await this.store.insert({
      tokenHash: sha256(token),
      tokenHint: token.slice(-4),
      referenceId: randomId('lic_'),
      status: input.status,
      expiresAt: input.expires_at ?? null,
      domainLimit: input.domain_limit,
      productSlug: input.product_slug,
      productName: input.product_name,
    });
    return { ...(await this.views([license]))[0]!, token };
  }

  async list(filter: LicenseFilter): Promise<Page<LicenseView>> {
    const where: FilterQuery<License> = {};
    if (filter.status) where.status = filter.status;
    if (filter.product_slug) where.productSlug = filter.product_slug;
    if (filter.q) {
      const like = `%${filter.q.replace(/[\\%_]/g, '\\$&')}%`;
      where.$or = [{ referenceId: filter.q }, { tokenHash: sha256(filter.q) }, { productSlug: { $ilike: like } }, { productName: { $ilike: like } }];
    }
    const [rows, total] = await this.store.page(where, filter.page, filter.per_page);
    return { items: await this.views(rows), total, page: filter.page, per_page: filter.per_page };
  }

  async get(id: number): Promise<LicenseView> {
    const license = await this.store.get({ id });
    if (!license) throw notFound('Licence');
    return (await this.views([license]))[0]!;
  }

  /** The licence behind a token or reference id (CLI `license show`). */
  async getByKey(key: string): Promise<LicenseView> {
    const license = await this.store.get(keyFilter(key));
    if (!license) throw licenseNotFound();
    return (await this.views([license]))[0]!;
  }

  /**
   * Changes status, expiry or limit. Lowering the limit below the domains in use deactivates
   * nothing: those sites keep working, and new domains are refused until enough leave.
   */
  async update(id: number, changes: UpdateLicenseInput): Promise<LicenseView> {
    const license = await this.withEvents(async (unit, emit) => {
      const license = await unit.lock({ id });
      if (!license) throw notFound('Licence');
      const previous = license.status;
      unit.change(license, {
        ...(changes.status !== undefined ? { status: changes.status } : {}),
        ...(changes.expires_at !== undefined ? { expiresAt: changes.expires_at } : {}),
        ...(changes.domain_limit !== undefined ? { domainLimit: changes.domain_limit } : {}),
      });
      await unit.save();
      if (license.status !== previous) await emit('license.status_changed', { license: eventLicense(license), previous_status: previous });
      return license;
    });
    return (await this.views([license]))[0]!;
  }

  async revoke(key: string): Promise<LicenseView> {
    const license = await this.withEvents(async (unit, emit) => {
      const license = await unit.lock(keyFilter(key));
      if (!license) throw licenseNotFound();
      const previous = license.status;
      unit.change(license, { status: 'revoked' });
      await unit.save();
      if (previous !== 'revoked') await emit('license.status_changed', { license: eventLicense(license), previous_status: previous });
      return license;
    });
    return (await this.views([license]))[0]!;
  }

  async activations(id: number, filter: { status?: ActivationStatus | undefined; page: number; per_page: number }): Promise<Page<ActivationView>> {
    if (!(await this.store.exists(id))) throw notFound('Licence');
    const [rows, total] = await this.store.activationPage(id, filter.status, filter.page, filter.per_page);
    return { items: rows.map(activationView), total, page: filter.page, per_page: filter.per_page };
  }

  private async views(licenses: License[]): Promise<LicenseView[]> {
    const counts = await this.store.activeDomains(licenses.map((l) => l.id));
    return licenses.map((l) => ({
      id: l.id,
      reference_id: l.referenceId,
      token_hint: l.tokenHint,
      status: l.status,
      expires_at: iso(l.expiresAt),
      domain_limit: l.domainLimit,
      active_domains: counts.get(l.id) ?? 0,
      product_slug: l.productSlug,
      product_name: l.productName,
      created_at: l.createdAt.toISOString(),
      updated_at: l.updatedAt.toISOString(),
    }));
  }

  // ---- the public protocol ---------------------------------------------------------------

  /**
   * Activates a site. The licence row is locked for the whole decision, so concurrent
   * activations are counted one after another and never exceed the domain limit.
   */
  async activate(key: string, site: SiteInput): Promise<Activated> {
    const place = siteDomain(site.siteUrl);
    if (!place) throw invalidRequest('site_url: names no usable domain', { errors: [{ field: 'site_url', message: 'names no usable domain', in: 'body' }] });
    const refusal: Refusal = {};
    try {
      return await this.withEvents((unit, emit) => this.activateIn(unit, emit, key, site, place, refusal));
    } catch (err) {
      // The refusal rolled its transaction back; its event is written on its own.
      if (refusal.refused) {
        const { license, limit } = refusal.refused;
        await this.withEvents((_unit, emit) =>
          emit('license.limit_reached', {
            license: eventLicense(license),
            site: { site_url: site.siteUrl, domain: place.domain, site_fingerprint: site.siteFingerprint },
            site_limit: limit,
          }),
        ).catch(() => undefined);
      }
      throw err;
    }
  }

  /** activate's decision, inside the transaction that holds the licence's row lock. */
  private async activateIn(unit: LicenseUnit, emit: Emit, key: string, site: SiteInput, place: SiteDomain, refusal: Refusal): Promise<Activated> {
    const license = await unit.lock(keyFilter(key));
    if (!license) throw licenseNotFound();
    assertUsable(license);
    const existing = await unit.activation(license, site.siteFingerprint);
    const versions = siteVersions(site);
    // The same site again: nothing to count, only its recorded versions change.
    if (existing?.status === 'active' && existing.domain === place.domain) {
      unit.change(existing, { ...versions, siteUrl: site.siteUrl });
      return { activation_id: existing.id, reactivated: true as const, license: describe(license, true) };
    }
    if (!place.local) {
      const domains = await unit.slotDomains(license, existing?.id);
      // A domain that already holds a slot (another plugin of the suite) takes no new one.
      if (!domains.has(place.domain) && domains.size >= license.domainLimit) {
        refusal.refused = { license, limit: license.domainLimit };
        throw siteLimitReached(license.domainLimit);
      }
    }
    const fields = { siteUrl: site.siteUrl, domain: place.domain, countsSlot: !place.local, status: 'active' as const, deactivatedAt: null };
    if (existing) {
      const wasActive = existing.status === 'active';
      unit.change(existing, { ...fields, ...versions, ...(wasActive ? {} : { activatedAt: new Date() }) });
      if (wasActive) return { activation_id: existing.id, reactivated: true as const, license: describe(license, true) };
      await unit.save();
      await emit('license.activated', { license: eventLicense(license), activation: activationView(existing) });
      return { activation_id: existing.id, license: describe(license, true) };
    }
    const created = unit.addActivation({
      id: randomId('act_'),
      license,
      siteFingerprint: site.siteFingerprint,
      ...fields,
      wpVersion: site.wpVersion ?? null,
      phpVersion: site.phpVersion ?? null,
      pluginVersion: site.pluginVersion ?? null,
      activatedAt: new Date(),
    });
    await unit.save();
    await emit('license.activated', { license: eventLicense(license), activation: activationView(created) });
    return { activation_id: created.id, license: describe(license, true) };
  }

  /**
   * Describes a usable licence; with a fingerprint, says whether that site holds an active
   * activation. A fingerprint is bound to the domain it was activated for: with `siteUrl` the
   * activation must be for that URL's domain; without it only an activation that holds a slot
   * matches, so a free activation from a local development host vouches for no other site. One
   * indexed query: this is the endpoint every site calls on a schedule.
   */
  async verify(key: string, siteFingerprint?: string, siteUrl?: string): Promise<VerifyResult> {
    const place = siteUrl === undefined ? undefined : siteDomain(siteUrl);
    if (siteUrl !== undefined && !place) {
      throw invalidRequest('site_url: names no usable domain', { errors: [{ field: 'site_url', message: 'names no usable domain', in: 'body' }] });
    }
    const row = await this.store.forVerify(keyFilter(key), siteFingerprint ?? null, place?.domain ?? null);
    if (!row) throw licenseNotFound();
    // The ORM's driver hands timestamps back as text.
    const expiresAt = row.expires_at === null ? null : new Date(row.expires_at);
    assertUsable({ status: row.status, expiresAt });
    return {
      license_status: 'active',
      expires_at: expiresAt ? formatSpecTimestamp(expiresAt) : null,
      domain_limit: row.domain_limit,
      site_match: row.site_match,
      product_slug: row.product_slug,
      product_name: row.product_name,
    };
  }

  /**
   * Deactivates a site whatever the licence's status (a site may always give its slot back).
   * The slot is freed when no other active activation holds the same domain.
   */
  async deactivate(key: string, siteFingerprint: string): Promise<{ activation_id: string; slot_freed: boolean }> {
    return this.withEvents(async (unit, emit) => {
      // Locked like activate, so two deactivations of one site cannot both succeed.
      const license = await unit.lock(keyFilter(key));
      if (!license) throw licenseNotFound();
      const activation = await unit.activation(license, siteFingerprint);
      if (!activation) throw activationNotFound();
      if (activation.status === 'deactivated') throw alreadyDeactivated();
      unit.change(activation, { status: 'deactivated', deactivatedAt: new Date() });
      const sharing = activation.countsSlot ? await unit.activeOnDomain(license, activation.domain, activation.id) : 0;
      const slotFreed = activation.countsSlot && sharing === 0;
      await unit.save();
      await emit('license.deactivated', { license: eventLicense(license), activation: activationView(activation), slot_freed: slotFreed });
      return { activation_id: activation.id, slot_freed: slotFreed };
    });
  }
}
