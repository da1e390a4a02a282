import { defineEntity, p, type InferEntity } from '@mikro-orm/core';

/** Stored statuses. `grace` (billing grace) reports `active` on the public endpoints. */
export const licenseStatuses = ['active', 'grace', 'expired', 'revoked', 'pending'] as const;
export type LicenseStatus = (typeof licenseStatuses)[number];

export const activationStatuses = ['active', 'deactivated'] as const;
export type ActivationStatus = (typeof activationStatuses)[number];

/** A licence key for a product; the key itself is stored only as its SHA-256 (`tokenHash`). */
export const License = defineEntity({
  name: 'License',
  tableName: 'licenses',
  properties: {
    id: p.integer().primary().autoincrement(),
    tokenHash: p.string().length(64).unique(),
    tokenHint: p.string().length(8),
    referenceId: p.string().length(40).unique(),
    status: p.enum([...licenseStatuses]),
    expiresAt: p.datetime().nullable(),
    domainLimit: p.integer(),
    productSlug: p.string().length(100),
    productName: p.string().length(200),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type License = InferEntity<typeof License>;

/** One site (identified by its fingerprint) on one licence; deactivating keeps the row. */
export const LicenseActivation = defineEntity({
  name: 'LicenseActivation',
  tableName: 'license_activations',
  properties: {
    id: p.string().primary().length(40),
    license: () => p.manyToOne(License).deleteRule('cascade'),
    siteFingerprint: p.string().length(128),
    siteUrl: p.string().length(2048),
    domain: p.string().length(255),
    /** False for local development hosts, which take no slot. */
    countsSlot: p.boolean(),
    status: p.enum([...activationStatuses]),
    wpVersion: p.string().length(50).nullable(),
    phpVersion: p.string().length(50).nullable(),
    pluginVersion: p.string().length(50).nullable(),
    activatedAt: p.datetime(),
    deactivatedAt: p.datetime().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type LicenseActivation = InferEntity<typeof LicenseActivation>;
