import { z } from 'zod';
import { named } from '../http/openapi.js';
import { activationStatuses, licenseStatuses } from './license.entities.js';

const spacedUtc = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})$/;
const dateOnly = /^\d{4}-\d{2}-\d{2}$/;
const isoWithZone = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * Reads an expiry: ISO 8601 with a zone, verify's `YYYY-MM-DD HH:MM:SS` (UTC), or a bare date,
 * which means the end of that day in UTC (a licence "valid until 2027-01-31" works on the 31st).
 */
export function parseExpiry(text: string): Date | undefined {
  const value = text.trim();
  const iso = dateOnly.test(value)
    ? `${value}T23:59:59Z`
    : spacedUtc.test(value)
      ? value.replace(spacedUtc, '$1T$2Z')
      : isoWithZone.test(value)
        ? value
        : undefined;
  if (!iso) return undefined;
  const [year, month, day] = iso.slice(0, 10).split('-').map(Number) as [number, number, number];
  // Date.UTC rolls 2027-02-30 over into March; a calendar date that does not exist is refused.
  const calendar = new Date(Date.UTC(year, month - 1, day));
  if (calendar.getUTCMonth() !== month - 1 || calendar.getUTCDate() !== day) return undefined;
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** The time format of verify answers: `YYYY-MM-DD HH:MM:SS`, UTC. */
export const formatSpecTimestamp = (date: Date) => date.toISOString().slice(0, 19).replace('T', ' ');

const expiry = z
  .string()
  .max(40)
  .transform((value, ctx) => {
    const date = parseExpiry(value);
    if (!date) {
      ctx.addIssue({ code: 'custom', message: 'expected an ISO 8601 timestamp with a zone, YYYY-MM-DD HH:MM:SS (UTC) or YYYY-MM-DD' });
      return z.NEVER;
    }
    return date;
  })
  .describe('ISO 8601 with a zone, `YYYY-MM-DD HH:MM:SS` (UTC), or `YYYY-MM-DD` (end of that day, UTC); null for no expiry');

const productSlug = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,99}$/, 'lower-case letters, digits, _ and -, at most 100');
const domainLimit = z.number().int().min(1).max(100_000).describe('Distinct site domains the licence may be active on');

export const createLicenseBody = z.strictObject({
  product_slug: productSlug,
  product_name: z.string().trim().min(1).max(200),
  domain_limit: domainLimit,
  expires_at: expiry.nullable().optional(),
  status: z.enum(licenseStatuses).default('active'),
});
named(createLicenseBody, 'LicenseCreate', {
  description: 'A licence to issue',
  examples: [{ product_slug: 'seo-pro', product_name: 'SEO Pro', domain_limit: 3, expires_at: '2026-12-31' }],
});
export type CreateLicenseInput = z.output<typeof createLicenseBody>;

export const updateLicenseBody = z
  .strictObject({
    status: z.enum(licenseStatuses).optional(),
    expires_at: expiry.nullable().optional(),
    domain_limit: domainLimit.optional(),
  })
  .refine((body) => Object.keys(body).length > 0, { message: 'give at least one of status, expires_at, domain_limit' });
named(updateLicenseBody, 'LicenseUpdate', { description: 'Any of status, expiry and domain limit', examples: [{ status: 'revoked' }] });
export type UpdateLicenseInput = z.output<typeof updateLicenseBody>;

const page = z.coerce.number().int().min(1).max(1_000_000).default(1);
const perPage = z.coerce.number().int().min(1).max(100).default(20);

export const listLicensesQuery = z.strictObject({
  status: z.enum(licenseStatuses).optional(),
  product_slug: productSlug.optional(),
  q: z.string().min(1).max(200).optional().describe('Matches the reference id, the licence token, or part of the product slug or name'),
  page,
  per_page: perPage,
});
export type LicenseFilter = z.output<typeof listLicensesQuery>;

export const listActivationsQuery = z.strictObject({ status: z.enum(activationStatuses).optional(), page, per_page: perPage });

export const licenseView = z.object({
  id: z.number().int(),
  reference_id: z.string(),
  token_hint: z.string().describe('Last four characters of the token; the token itself is shown only when issued'),
  status: z.enum(licenseStatuses),
  expires_at: z.string().nullable().describe('ISO 8601, UTC; null for no expiry'),
  domain_limit: z.number().int(),
  active_domains: z.number().int().describe('Distinct domains (local hosts excluded) with an active activation'),
  product_slug: z.string(),
  product_name: z.string(),
  created_at: z.string(),
  updated_at: z.string(),
});
named(licenseView, 'License', {
  description: 'A licence (never its token)',
  examples: [
    {
      id: 1,
      reference_id: 'lic_k7qxv2m4bz3np5rtw6ya',
      token_hint: 'x7Qa',
      status: 'active',
      expires_at: '2026-12-31T23:59:59.000Z',
      domain_limit: 3,
      active_domains: 1,
      product_slug: 'seo-pro',
      product_name: 'SEO Pro',
      created_at: '2025-01-01T12:00:00.000Z',
      updated_at: '2025-01-01T12:00:00.000Z',
    },
  ],
});
export type LicenseView = z.infer<typeof licenseView>;

export const issuedLicenseView = licenseView.extend({ token: z.string().describe('The licence key; shown only here') });
named(issuedLicenseView, 'IssuedLicense', { description: 'A licence just issued, with its token (shown only here)' });
export type IssuedLicenseView = z.infer<typeof issuedLicenseView>;

export const activationView = z.object({
  activation_id: z.string(),
  site_url: z.string(),
  domain: z.string(),
  site_fingerprint: z.string(),
  counts_slot: z.boolean().describe('False for local development hosts'),
  status: z.enum(activationStatuses),
  wp_version: z.string().nullable(),
  php_version: z.string().nullable(),
  plugin_version: z.string().nullable(),
  activated_at: z.string(),
  deactivated_at: z.string().nullable(),
  updated_at: z.string(),
});
named(activationView, 'LicenseActivation', { description: 'A site a licence was activated on' });
export type ActivationView = z.infer<typeof activationView>;

export const pageOf = <T extends z.ZodType>(item: T) =>
  z.object({ items: z.array(item), total: z.number().int(), page: z.number().int(), per_page: z.number().int() });
