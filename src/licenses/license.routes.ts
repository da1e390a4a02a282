import type { Context } from 'koa';
import { z } from 'zod';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute, type RouteErrors } from '../http/route.js';
import { rateLimited, type HttpErrorCode } from '../platform/errors.js';
import type { Metrics } from '../platform/metrics.js';
import type { Config } from '../config.js';
import type { RateLimiter } from '../platform/rate-limit.js';
import type { LicenseKeyService } from './license.keys.js';
import type { LicenseService } from './license.service.js';

const portalRoot = '/api/portal/v1';
const root = `${portalRoot}/licenses`;
const RATE_WINDOW_SECONDS = 60;

const keyParams = z.object({
  key: z.string().min(1).max(256).describe('The licence token or its reference id'),
});

/** Forms send empty fields for unset values; an empty optional field counts as absent. */
const optionalText = (max: number) =>
  z
    .string()
    .trim()
    .max(max)
    .optional()
    .transform((value) => (value === '' ? undefined : value));

const fingerprint = z
  .string()
  .trim()
  .min(1)
  .max(128)
  .regex(/^[\x21-\x7e]*$/, 'printable characters without spaces')
  .describe('SHA-256 of the home URL plus a per-site secret; identifies the site');

const failure = <C extends [HttpErrorCode, ...HttpErrorCode[]]>(codes: C, data?: z.ZodType) =>
  z.object({
    status: z.literal('fail'),
    error: z.enum(codes),
    message: z.string(),
    ...(data ? { data } : { data: z.record(z.string(), z.unknown()).optional() }),
  });

const timestamp = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);

const signature = z
  .object({
    alg: z.literal('ed25519'),
    key_id: z.string().describe('The signing key, as `GET /api/portal/v1/keys` lists it'),
    issued_at: timestamp.describe('When the answer was signed, ISO 8601 UTC to the second'),
    valid_until: timestamp.describe('When the signature stops vouching for the answer'),
    value: z.string().describe('Base64 Ed25519 signature over the canonical form (docs/licences.md)'),
  })
  .describe('Ed25519 signature over the canonical form of the answer, the key and the fingerprint');
named(signature, 'LicenseSignature');

const verifiedLicense = {
  license_status: z.literal('active'),
  expires_at: z
    .string()
    .regex(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/)
    .nullable()
    .describe('YYYY-MM-DD HH:MM:SS, UTC; null for a licence without expiry'),
  domain_limit: z.number().int(),
  site_match: z.boolean().describe('False without site_fingerprint'),
  product_slug: z.string(),
  product_name: z.string(),
};

const publicKey = z.object({
  key_id: z.string().describe('First 16 hex digits of the SHA-256 of the raw public key'),
  alg: z.literal('ed25519'),
  public_key: z.string().describe('Base64 of the raw 32-byte Ed25519 public key'),
  status: z.enum(['current', 'retired']),
  created_at: timestamp,
  retired_at: z.string().nullable(),
  valid_until: z.string().nullable().describe('A retired key is listed, and its signatures verify, until then'),
  endorsement: z
    .object({ key_id: z.string(), value: z.string() })
    .nullable()
    .describe("The predecessor's signature over this key's canonical form; null for the first key"),
});
named(publicKey, 'LicenseSigningKey', { description: 'A public key that signs activate and verify answers' });

const unusable = {
  description: 'The licence is past its expiry date (`license_expired`) or expired, revoked or pending (`license_inactive`)',
  raw: failure(['license_expired', 'license_inactive']),
};
const unknownKey = { description: 'No licence matches the key (`license_not_found`)', raw: failure(['license_not_found']) };
const limited = { rate_limited: 'More than SVC_LICENSE_RATE_LIMIT requests within the last minute from this address, see Retry-After' } satisfies RouteErrors;

/** The public licence endpoints (activate, verify, deactivate, keys): form-encoded (JSON too), no session. */
export function licenseRoutes({
  licenses,
  licenseKeys,
  limiter,
  config,
  metrics,
}: {
  licenses: LicenseService;
  licenseKeys: LicenseKeyService;
  limiter: RateLimiter;
  config: Config;
  metrics: Pick<Metrics, 'licenseRequests' | 'licenseRateLimited'>;
}): AnyRoute[] {
  // One budget per client address over all three endpoints, counted in PostgreSQL so that every
  // API process shares it. Malformed requests count too: the guard runs before validation (for
  // verify, alongside it). Each request is counted once by its answer (ok, or the error code),
  // however the guard and the handler ended.
  const guardOf = (endpoint: 'activate' | 'verify' | 'deactivate') => async (ctx: Context) => {
    ctx.res.once('finish', () => {
      const code = (ctx.body as { error?: unknown } | undefined)?.error;
      metrics.licenseRequests.inc({ endpoint, outcome: ctx.status < 400 ? 'ok' : typeof code === 'string' ? code : 'internal_error' });
    });
    const decision = await limiter.hit(`license:${ctx.ip}`, config.SVC_LICENSE_RATE_LIMIT, RATE_WINDOW_SECONDS);
    if (!decision.allowed) {
      metrics.licenseRateLimited.inc();
      throw rateLimited(decision.retryAfterSeconds);
    }
  };
  const common = {
    tag: 'licenses',
    access: 'public' as const,
    params: keyParams,
    bodyTypes: ['form', 'json'] as ('form' | 'json')[],
    invalidCode: 'invalid_request' as const,
    errors: limited,
  };
  return [
    defineRoute({
      method: 'get',
      path: `${portalRoot}/keys`,
      operationId: 'listLicenseSigningKeys',
      tag: 'licenses',
      access: 'public',
      summary: 'The public keys that sign activate and verify answers: the current one and retired ones still valid',
      description:
        "Clients pin a key (printed by `svc license keys`) and learn its successors here: each key after the first carries an endorsement, its predecessor's Ed25519 signature over the key's canonical form (docs/licences.md).",
      responses: {
        200: { description: 'The current key first, then retired keys, most recently retired first', data: z.object({ items: z.array(publicKey) }) },
      },
      handler: async () => ({ data: { items: await licenseKeys.list() } }),
    }),
    defineRoute({
      ...common,
      method: 'post',
      path: `${root}/{key}/activate`,
      operationId: 'activateLicense',
      summary: 'Activates the licence for a site; the same site again answers reactivated: true',
      description:
        'A new site uses a domain slot. A site already active (same fingerprint) uses none and has its versions updated; another plugin on a domain that already holds a slot uses none (the limit counts distinct domains); local development hosts (localhost, 127.0.0.1, *.local, *.localhost, *.test) use none. Order of checks: 400 missing fields, 404 `license_not_found`, 403 `license_expired`, 403 `license_inactive`, 409 `site_limit_reached` with `data.site_limit`.',
      body: z.strictObject({
        site_url: z.string().trim().min(1).max(2048).describe("The site's home URL; its domain counts against the limit"),
        site_fingerprint: fingerprint,
        wp_version: optionalText(50),
        php_version: optionalText(50),
        plugin_version: optionalText(50),
      }),
      responses: {
        200: {
          description:
            'Active. `reactivated: true` when this fingerprint was already active. `license` describes the licence as verify does; `signature` covers both',
          data: z.object({
            activation_id: z.string(),
            reactivated: z.literal(true).optional(),
            license: z.object(verifiedLicense),
            signature,
          }),
        },
        403: unusable,
        404: unknownKey,
        409: {
          description: 'Every domain slot is in use (`site_limit_reached`); the limit is in `data.site_limit`',
          raw: failure(['site_limit_reached'], z.object({ site_limit: z.number().int() })),
        },
      },
      guard: guardOf('activate'),
      handler: async ({ params, body }) => {
        const activated = await licenses.activate(params.key, {
          siteUrl: body.site_url,
          siteFingerprint: body.site_fingerprint,
          wpVersion: body.wp_version,
          phpVersion: body.php_version,
          pluginVersion: body.plugin_version,
        });
        const signed = await licenseKeys.signAnswer({
          action: 'activate',
          licenseKey: params.key,
          siteFingerprint: body.site_fingerprint,
          license: activated.license,
          activation: { activation_id: activated.activation_id, reactivated: activated.reactivated === true },
        });
        return { data: { ...activated, signature: signed } };
      },
    }),
    defineRoute({
      ...common,
      method: 'post',
      path: `${root}/{key}/verify`,
      operationId: 'verifyLicense',
      summary: 'Describes the licence; with site_fingerprint (and site_url), says whether that site is active on it',
      description:
        'The success body is not the data envelope: `{status: "ok", license_status, expires_at, domain_limit, site_match, product_slug, product_name, signature}`. A licence in billing grace reports `active`. Clients treat a network error as no news; only a definitive answer (200, 403, 404) changes a site\'s edition.',
      body: z.strictObject({
        site_fingerprint: fingerprint.optional().or(z.literal('').transform(() => undefined)),
        site_url: optionalText(2048).describe(
          "The site's home URL. With it, site_match requires the fingerprint to be active for this URL's domain; without it, only an activation holding a slot matches (a local development host's does not)",
        ),
      }),
      bodyOptional: true,
      // Verify only reads, so its lookup runs while the rate limit is counted.
      readOnly: true,
      responses: {
        200: {
          description: 'The licence is usable',
          raw: z.object({ status: z.literal('ok'), ...verifiedLicense, signature }),
        },
        403: unusable,
        404: unknownKey,
      },
      guard: guardOf('verify'),
      handler: async ({ params, body }) => {
        const license = await licenses.verify(params.key, body.site_fingerprint, body.site_url);
        const signed = await licenseKeys.signAnswer({ action: 'verify', licenseKey: params.key, siteFingerprint: body.site_fingerprint, license });
        return { raw: { status: 'ok', ...license, signature: signed } };
      },
    }),
    defineRoute({
      ...common,
      method: 'post',
      path: `${root}/{key}/deactivate`,
      operationId: 'deactivateLicense',
      summary: "Deactivates a site; its domain's slot is freed when no other active activation holds it",
      description: 'Works whatever the licence status, so a site can always give its slot back.',
      body: z.strictObject({ site_fingerprint: fingerprint }),
      responses: {
        200: { description: 'Deactivated', data: z.object({ activation_id: z.string(), slot_freed: z.boolean() }) },
        404: {
          description: 'No licence matches the key (`license_not_found`), or this site has no activation on it (`activation_not_found`)',
          raw: failure(['license_not_found', 'activation_not_found']),
        },
        409: { description: 'The activation was already deactivated (`already_deactivated`)', raw: failure(['already_deactivated']) },
      },
      guard: guardOf('deactivate'),
      handler: async ({ params, body }) => ({ data: await licenses.deactivate(params.key, body.site_fingerprint) }),
    }),
  ];
}
