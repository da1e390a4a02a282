import type { Context } from 'koa';
import { z } from 'zod';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { rateLimited } from '../platform/errors.js';
import type { Services } from '../services.js';

const root = '/api/portal/v1/licenses';
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

const failure = <C extends [string, ...string[]]>(codes: C, data?: z.ZodType) =>
  z.object({
    status: z.literal('fail'),
    error: z.enum(codes),
    message: z.string(),
    ...(data ? { data } : { data: z.record(z.string(), z.unknown()).optional() }),
  });

const unusable = { description: 'The licence is past its expiry date (`license_expired`) or expired, revoked or pending (`license_inactive`)', raw: failure(['license_expired', 'license_inactive']) };
const unknownKey = { description: 'No licence matches the key (`license_not_found`)', raw: failure(['license_not_found']) };
const limited = { 429: 'More than SVC_LICENSE_RATE_LIMIT requests this minute from this address (`rate_limited`), see Retry-After' };

/** The public licence endpoints of SPEC's licence root: form-encoded (JSON too), no session. */
export function licenseRoutes({ licenses, limiter, config }: Services): AnyRoute[] {
  // One budget per client address over all three endpoints, counted in PostgreSQL so that every
  // API process shares it. Malformed requests count too: the guard runs before validation (for
  // verify, alongside it).
  const guard = async (ctx: Context) => {
    const decision = await limiter.hit(`license:${ctx.ip}`, config.SVC_LICENSE_RATE_LIMIT, RATE_WINDOW_SECONDS);
    if (!decision.allowed) throw rateLimited(decision.retryAfterSeconds);
  };
  const common = {
    tag: 'licenses',
    access: 'public' as const,
    params: keyParams,
    bodyTypes: ['form', 'json'] as ('form' | 'json')[],
    guard,
    invalidCode: 'invalid_request' as const,
    errors: limited,
  };
  return [
    defineRoute({
      ...common,
      method: 'post',
      path: `${root}/{key}/activate`,
      operationId: 'activateLicense',
      summary: 'Activates the licence for a site; the same site again answers reactivated: true',
      description:
        "A new site uses a domain slot. A site already active (same fingerprint) uses none and has its versions updated; another plugin on a domain that already holds a slot uses none (the limit counts distinct domains); local development hosts (localhost, 127.0.0.1, *.local, *.localhost, *.test) use none. Order of checks: 400 missing fields, 404 `license_not_found`, 403 `license_expired`, 403 `license_inactive`, 409 `site_limit_reached` with `data.site_limit`.",
      body: z.strictObject({
        site_url: z.string().trim().min(1).max(2048).describe("The site's home URL; its domain counts against the limit"),
        site_fingerprint: fingerprint,
        wp_version: optionalText(50),
        php_version: optionalText(50),
        plugin_version: optionalText(50),
      }),
      responses: {
        200: {
          description: 'Active. `reactivated: true` when this fingerprint was already active',
          data: z.object({ activation_id: z.string(), reactivated: z.literal(true).optional() }),
        },
        403: unusable,
        404: unknownKey,
        409: {
          description: 'Every domain slot is in use (`site_limit_reached`); the limit is in `data.site_limit`',
          raw: failure(['site_limit_reached'], z.object({ site_limit: z.number().int() })),
        },
      },
      handler: async ({ params, body }) => ({
        data: await licenses.activate(params.key, {
          siteUrl: body.site_url,
          siteFingerprint: body.site_fingerprint,
          wpVersion: body.wp_version,
          phpVersion: body.php_version,
          pluginVersion: body.plugin_version,
        }),
      }),
    }),
    defineRoute({
      ...common,
      method: 'post',
      path: `${root}/{key}/verify`,
      operationId: 'verifyLicense',
      summary: 'Describes the licence; with site_fingerprint, says whether that site is active on it',
      description:
        'The success body is not the data envelope: `{status: "ok", license_status, expires_at, domain_limit, site_match, product_slug, product_name}`. A licence in billing grace reports `active`. Clients treat a network error as no news; only a definitive answer (200, 403, 404) changes a site\'s edition.',
      body: z.strictObject({ site_fingerprint: fingerprint.optional().or(z.literal('').transform(() => undefined)) }),
      bodyOptional: true,
      // Verify only reads, so its lookup runs while the rate limit is counted.
      readOnly: true,
      responses: {
        200: {
          description: 'The licence is usable',
          raw: z.object({
            status: z.literal('ok'),
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
          }),
        },
        403: unusable,
        404: unknownKey,
      },
      handler: async ({ params, body }) => ({ raw: { status: 'ok', ...(await licenses.verify(params.key, body.site_fingerprint)) } }),
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
      handler: async ({ params, body }) => ({ data: await licenses.deactivate(params.key, body.site_fingerprint) }),
    }),
  ];
}
