import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { runCli } from './helpers/cli.js';
import { issueLicense, portal, site } from './helpers/licenses.js';

let app: TestApp;

beforeAll(async () => {
  // This file's requests all come from 127.0.0.1; the rate limit has its own apps below.
  app = await startTestApp({ env: { SVC_LICENSE_RATE_LIMIT: '100000' } });
});
afterAll(async () => app?.close());

const activate = (key: string, form: Record<string, string>) => portal(app.anonymous, key, 'activate', form);
const verify = (key: string, form: Record<string, string> = {}) => portal(app.anonymous, key, 'verify', form);
const deactivate = (key: string, form: Record<string, string>) => portal(app.anonymous, key, 'deactivate', form);

async function licenseState(id: number) {
  return (await app.admin.get(`/api/management/v1/licenses/${id}`)).body.data;
}
async function activationsOf(id: number) {
  return (await app.admin.get(`/api/management/v1/licenses/${id}/activations?per_page=100`)).body.data.items as Record<string, unknown>[];
}
const pastDate = () => new Date(Date.now() - 60_000).toISOString();
/** The signature every activate and verify answer carries (its checks: license-signatures.test.ts). */
const signatureShape = {
  alg: 'ed25519',
  key_id: expect.any(String),
  issued_at: expect.any(String),
  valid_until: expect.any(String),
  value: expect.any(String),
};
/** What activate says about the licence: verify's fields, for this (now active) site. */
const activeLicense = expect.objectContaining({ license_status: 'active', site_match: true });

describe('licence status: active (and grace) verifies; an unknown key, a past expiry or an unusable status is refused', () => {
  it('verifies an active licence with the verify body, expires_at as YYYY-MM-DD HH:MM:SS UTC', async () => {
    const license = await issueLicense(app, { domain_limit: 3, expires_at: '2031-05-06T09:08:07+02:00' });
    const res = await verify(license.token);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: 'ok',
      license_status: 'active',
      expires_at: '2031-05-06 07:08:07',
      domain_limit: 3,
      site_match: false,
      product_slug: 'seo-suite',
      product_name: 'SEO Suite Pro',
      signature: signatureShape,
    });
  });

  it('reports a licence without expiry with expires_at null', async () => {
    const license = await issueLicense(app);
    expect((await verify(license.token)).body.expires_at).toBeNull();
  });

  it('reports a licence in billing grace as active, for verify and activate', async () => {
    const license = await issueLicense(app, { status: 'grace' });
    const res = await verify(license.token);
    expect(res.status).toBe(200);
    expect(res.body.license_status).toBe('active');
    expect((await activate(license.token, site('https://grace.example'))).status).toBe(200);
  });

  it.each(['expired', 'revoked', 'pending'])('refuses a %s licence with 403 license_inactive on activate and verify', async (status) => {
    const license = await issueLicense(app, { status });
    for (const res of [await activate(license.token, site('https://inactive.example')), await verify(license.token)]) {
      expect(res.status).toBe(403);
      expect(res.body).toEqual({ status: 'fail', error: 'license_inactive', message: expect.any(String) });
    }
  });

  it('refuses a licence past expires_at with 403 license_expired, before looking at its status', async () => {
    for (const status of ['active', 'grace', 'revoked', 'pending']) {
      const license = await issueLicense(app, { status, expires_at: pastDate() });
      for (const res of [await activate(license.token, site('https://late.example')), await verify(license.token)]) {
        expect(res.status, status).toBe(403);
        expect(res.body).toEqual({ status: 'fail', error: 'license_expired', message: expect.any(String) });
      }
    }
  });

  it('stops working the moment expires_at passes, for a site that was active', async () => {
    const license = await issueLicense(app);
    const s = site('https://was-active.example');
    expect((await activate(license.token, s)).status).toBe(200);
    await app.sql(`update licenses set expires_at = now() - interval '1 second' where id = $1`, [license.id]);
    const res = await verify(license.token, { site_fingerprint: s.site_fingerprint });
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('license_expired');
  });

  it('answers an unknown key 404 license_not_found on every endpoint', async () => {
    for (const key of ['no-such-licence-token-0000000000000000000000', 'lic_aaaaaaaaaaaaaaaaaaaa', 'x']) {
      const s = site('https://unknown.example');
      for (const res of [await activate(key, s), await verify(key), await deactivate(key, { site_fingerprint: s.site_fingerprint })]) {
        expect(res.status).toBe(404);
        expect(res.body).toEqual({ status: 'fail', error: 'license_not_found', message: expect.any(String) });
      }
    }
  });

  it('resolves the token and the reference id to the same licence', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    expect(license.reference_id).not.toBe(license.token);
    const s = site('https://both-keys.example');
    const byToken = await activate(license.token, s);
    expect(byToken.status).toBe(200);
    const byReference = await verify(license.reference_id, { site_fingerprint: s.site_fingerprint });
    expect(byReference.body).toMatchObject({ status: 'ok', site_match: true, domain_limit: 1 });
    // The reference id sees the slot the token used, and the same activation.
    expect((await activate(license.reference_id, site('https://other.example'))).body.error).toBe('site_limit_reached');
    const again = await activate(license.reference_id, s);
    expect(again.body.data).toEqual({ activation_id: byToken.body.data.activation_id, reactivated: true, license: activeLicense, signature: signatureShape });
    expect((await deactivate(license.reference_id, { site_fingerprint: s.site_fingerprint })).status).toBe(200);
    expect((await verify(license.token, { site_fingerprint: s.site_fingerprint })).body.site_match).toBe(false);
  });
});

describe('activation state machine: none -> active -> deactivated; the same fingerprint reactivates, a second deactivate is refused', () => {
  it('none -> active: returns an activation_id and uses a slot; the versions are recorded', async () => {
    const license = await issueLicense(app);
    const s = site('https://shop.example.com/');
    const res = await activate(license.token, { ...s, wp_version: '6.6.2', php_version: '8.3.1', plugin_version: '2.0.0' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok', data: { activation_id: expect.any(String), license: activeLicense, signature: signatureShape } });
    expect((await licenseState(license.id)).active_domains).toBe(1);
    const [activation] = await activationsOf(license.id);
    expect(activation).toMatchObject({
      activation_id: res.body.data.activation_id,
      domain: 'shop.example.com',
      site_fingerprint: s.site_fingerprint,
      status: 'active',
      counts_slot: true,
      wp_version: '6.6.2',
      php_version: '8.3.1',
      plugin_version: '2.0.0',
    });
  });

  it('active + the same fingerprint: reactivated true, no new slot, versions updated (omitted ones kept)', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const s = site('https://same.example');
    const first = await activate(license.token, { ...s, wp_version: '6.5', php_version: '8.1', plugin_version: '1.0' });
    const second = await activate(license.token, { ...s, wp_version: '6.6', plugin_version: '1.1' });
    expect(second.status).toBe(200);
    expect(second.body.data).toEqual({ activation_id: first.body.data.activation_id, reactivated: true, license: activeLicense, signature: signatureShape });
    expect((await licenseState(license.id)).active_domains).toBe(1);
    const items = await activationsOf(license.id);
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ wp_version: '6.6', php_version: '8.1', plugin_version: '1.1' });
    // Even on a full licence the active site reactivates.
    expect((await activate(license.token, s)).body.data.reactivated).toBe(true);
  });

  it('verify: site_match says whether that fingerprint holds an active activation', async () => {
    const license = await issueLicense(app);
    const s = site('https://match.example');
    await activate(license.token, s);
    expect((await verify(license.token, { site_fingerprint: s.site_fingerprint })).body.site_match).toBe(true);
    expect((await verify(license.token, { site_fingerprint: site('https://match.example').site_fingerprint })).body.site_match).toBe(false);
    expect((await verify(license.token)).body.site_match).toBe(false);
    expect((await verify(license.token, { site_fingerprint: '' })).body.site_match).toBe(false);
  });

  it('a fingerprint is bound to the domain it was activated for: a free local activation vouches for no other site', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    // Another site's fingerprint, activated from a local development host: no slot is taken.
    const shop = site('https://shop.example.com');
    expect((await activate(license.token, { ...shop, site_url: 'http://localhost' })).status).toBe(200);
    expect((await licenseState(license.id)).active_domains).toBe(0);
    // The real site asking about its own fingerprint is not active: not without naming itself,
    // nor when it names its domain, which is not the domain the fingerprint was activated for.
    expect((await verify(license.token, { site_fingerprint: shop.site_fingerprint })).body.site_match).toBe(false);
    expect((await verify(license.token, { site_fingerprint: shop.site_fingerprint, site_url: shop.site_url })).body.site_match).toBe(false);
    // The local site naming itself is active.
    expect((await verify(license.token, { site_fingerprint: shop.site_fingerprint, site_url: 'http://localhost/' })).body.site_match).toBe(true);
  });

  it('with site_url, verify matches only the domain the fingerprint holds its slot for', async () => {
    const license = await issueLicense(app);
    const s = site('https://bound.example');
    await activate(license.token, s);
    expect((await verify(license.token, { site_fingerprint: s.site_fingerprint })).body.site_match).toBe(true);
    expect((await verify(license.token, { site_fingerprint: s.site_fingerprint, site_url: 'https://WWW.bound.example/shop' })).body.site_match).toBe(true);
    expect((await verify(license.token, { site_fingerprint: s.site_fingerprint, site_url: 'https://other.example' })).body.site_match).toBe(false);
    const bad = await verify(license.token, { site_fingerprint: s.site_fingerprint, site_url: 'mailto:x@example.com' });
    expect(bad.status).toBe(400);
  });

  it('active -> deactivated frees the slot; a second deactivate is 409 already_deactivated', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const a = site('https://first.example');
    const b = site('https://second.example');
    await activate(license.token, a);
    expect((await activate(license.token, b)).status).toBe(409);
    const res = await deactivate(license.token, { site_fingerprint: a.site_fingerprint });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ activation_id: expect.any(String), slot_freed: true });
    expect((await licenseState(license.id)).active_domains).toBe(0);
    expect((await verify(license.token, { site_fingerprint: a.site_fingerprint })).body.site_match).toBe(false);
    const again = await deactivate(license.token, { site_fingerprint: a.site_fingerprint });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ status: 'fail', error: 'already_deactivated', message: expect.any(String) });
    expect((await activate(license.token, b)).status).toBe(200);
  });

  it('deactivate of a site with no activation is 404 activation_not_found', async () => {
    const license = await issueLicense(app);
    await activate(license.token, site('https://someone.example'));
    const res = await deactivate(license.token, { site_fingerprint: site('https://nobody.example').site_fingerprint });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ status: 'fail', error: 'activation_not_found', message: expect.any(String) });
    // A fingerprint active on another licence is not this licence's activation.
    const other = await issueLicense(app);
    const s = site('https://elsewhere.example');
    await activate(other.token, s);
    expect((await deactivate(license.token, { site_fingerprint: s.site_fingerprint })).body.error).toBe('activation_not_found');
  });

  it('deactivates on a revoked licence, so a site can always give its slot back', async () => {
    const license = await issueLicense(app);
    const s = site('https://leaving.example');
    await activate(license.token, s);
    await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked' });
    expect((await deactivate(license.token, { site_fingerprint: s.site_fingerprint })).status).toBe(200);
  });

  it('deactivated -> active again when a slot is free (same activation_id), refused when none is', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const a = site('https://comeback.example');
    const first = await activate(license.token, a);
    await deactivate(license.token, { site_fingerprint: a.site_fingerprint });
    const back = await activate(license.token, a);
    expect(back.status).toBe(200);
    expect(back.body.data).toEqual({ activation_id: first.body.data.activation_id, license: activeLicense, signature: signatureShape });
    expect((await verify(license.token, { site_fingerprint: a.site_fingerprint })).body.site_match).toBe(true);
    // Gone again, and meanwhile another domain took the only slot.
    await deactivate(license.token, { site_fingerprint: a.site_fingerprint });
    expect((await activate(license.token, site('https://newcomer.example'))).status).toBe(200);
    const refused = await activate(license.token, a);
    expect(refused.status).toBe(409);
    expect(refused.body.error).toBe('site_limit_reached');
  });

  it('a site that moves to another domain keeps its activation, and the old domain its slot no longer', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const fingerprint = site('https://old-home.example').site_fingerprint;
    const first = await activate(license.token, { site_url: 'https://old-home.example', site_fingerprint: fingerprint });
    const moved = await activate(license.token, { site_url: 'https://new-home.example', site_fingerprint: fingerprint });
    expect(moved.body.data).toEqual({ activation_id: first.body.data.activation_id, reactivated: true, license: activeLicense, signature: signatureShape });
    expect((await activationsOf(license.id)).map((a) => a.domain)).toEqual(['new-home.example']);
    expect((await licenseState(license.id)).active_domains).toBe(1);
    expect((await activate(license.token, site('https://old-home.example'))).status).toBe(409);
  });

  it('409 site_limit_reached states the limit in data.site_limit once every domain slot is used', async () => {
    const license = await issueLicense(app, { domain_limit: 2 });
    expect((await activate(license.token, site('https://one.example'))).status).toBe(200);
    expect((await activate(license.token, site('https://two.example'))).status).toBe(200);
    const res = await activate(license.token, site('https://three.example'));
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ status: 'fail', error: 'site_limit_reached', message: expect.any(String), data: { site_limit: 2 } });
    expect((await licenseState(license.id)).active_domains).toBe(2);
  });

  it('a second plugin on a domain that holds a slot uses no new slot; the slot goes with the last one', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const seo = site('https://suite.example', 'seo-plugin-secret');
    const forms = site('https://suite.example', 'forms-plugin-secret');
    expect(seo.site_fingerprint).not.toBe(forms.site_fingerprint);
    const first = await activate(license.token, seo);
    const second = await activate(license.token, forms);
    expect(second.status).toBe(200);
    expect(second.body.data.activation_id).not.toBe(first.body.data.activation_id);
    expect(second.body.data.reactivated).toBeUndefined();
    expect((await licenseState(license.id)).active_domains).toBe(1);
    expect((await activate(license.token, site('https://another.example'))).status).toBe(409);
    // One plugin leaves: the domain still holds the slot.
    expect((await deactivate(license.token, { site_fingerprint: seo.site_fingerprint })).body.data.slot_freed).toBe(false);
    expect((await activate(license.token, site('https://another.example'))).status).toBe(409);
    // The last one leaves: the slot is free.
    expect((await deactivate(license.token, { site_fingerprint: forms.site_fingerprint })).body.data.slot_freed).toBe(true);
    expect((await activate(license.token, site('https://another.example'))).status).toBe(200);
  });

  it('normalises domains: case, www, port, path and IDN name one slot', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    for (const url of ['https://www.Example.org/shop/', 'http://EXAMPLE.org:8080', 'example.org/blog?x=1', 'https://example.org.']) {
      const res = await activate(license.token, site(url));
      expect(res.status, url).toBe(200);
    }
    expect((await licenseState(license.id)).active_domains).toBe(1);
    expect(new Set((await activationsOf(license.id)).map((a) => a.domain))).toEqual(new Set(['example.org']));

    const idn = await issueLicense(app, { domain_limit: 1 });
    expect((await activate(idn.token, site('https://Bücher.de/'))).status).toBe(200);
    expect((await activate(idn.token, site('https://www.xn--bcher-kva.de'))).status).toBe(200);
    expect((await activate(idn.token, site('https://bücher.at'))).status).toBe(409);
    expect((await activationsOf(idn.id)).map((a) => a.domain)).toEqual(['xn--bcher-kva.de', 'xn--bcher-kva.de']);
  });

  it('lets local development hosts activate without taking a slot', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    expect((await activate(license.token, site('https://live.example'))).status).toBe(200);
    for (const url of ['http://localhost:8888/wp', 'http://127.0.0.1', 'https://shop.local', 'http://plugin.localhost', 'https://staging.test']) {
      const res = await activate(license.token, site(url));
      expect(res.status, url).toBe(200);
    }
    expect((await licenseState(license.id)).active_domains).toBe(1);
    const local = (await activationsOf(license.id)).filter((a) => a.counts_slot === false).map((a) => a.domain);
    expect(local.sort()).toEqual(['127.0.0.1', 'localhost', 'plugin.localhost', 'shop.local', 'staging.test']);
    expect((await activate(license.token, site('https://staging.example'))).status).toBe(409);
  });
});

describe('request validation', () => {
  it('answers 400 invalid_request naming each missing field', async () => {
    const license = await issueLicense(app);
    const s = site('https://fields.example');
    const cases: [Promise<{ status: number; body: any }>, string[]][] = [
      [activate(license.token, { site_fingerprint: s.site_fingerprint }), ['site_url']],
      [activate(license.token, { site_url: s.site_url }), ['site_fingerprint']],
      [activate(license.token, { site_url: '', site_fingerprint: '' }), ['site_fingerprint', 'site_url']],
      [activate(license.token, { wp_version: '6.6' }), ['site_fingerprint', 'site_url']],
      [deactivate(license.token, { other: 'x' }), ['other', 'site_fingerprint']],
    ];
    for (const [pending, fields] of cases) {
      const res = await pending;
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_request');
      expect(res.body.data.errors.map((e: { field: string }) => e.field).sort()).toEqual(fields);
    }
    for (const res of [await activate(license.token, {}), await deactivate(license.token, {})]) {
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_request');
    }
    // Checked before the key: a malformed request is malformed whatever the key.
    expect((await activate('unknown-key', {})).status).toBe(400);
    expect(await activationsOf(license.id)).toHaveLength(0);
  });

  it('refuses a site_url with no usable domain', async () => {
    const license = await issueLicense(app);
    for (const url of ['mailto:owner@example.com', 'ftp://example.com', 'http://exa mple.com']) {
      const res = await activate(license.token, site(url));
      expect(res.status, url).toBe(400);
      expect(res.body.error).toBe('invalid_request');
      expect(res.body.data.errors[0].field).toBe('site_url');
    }
  });

  it('accepts JSON bodies as well as forms', async () => {
    const license = await issueLicense(app);
    const s = site('https://json.example');
    const res = await app.anonymous.post(`/api/portal/v1/licenses/${license.token}/activate`, { ...s, plugin_version: '3.1' });
    expect(res.status).toBe(200);
    const check = await app.anonymous.post(`/api/portal/v1/licenses/${license.reference_id}/verify`, { site_fingerprint: s.site_fingerprint });
    expect(check.body.site_match).toBe(true);
    const wrongType = await app.anonymous.post(`/api/portal/v1/licenses/${license.token}/activate`, { ...s, wp_version: 6 });
    expect(wrongType.status).toBe(400);
    expect(wrongType.body.error).toBe('invalid_request');
  });
});

describe('concurrency', () => {
  it('50 concurrent activations of different domains for the last free slot: exactly one succeeds', async () => {
    const license = await issueLicense(app, { domain_limit: 3 });
    await activate(license.token, site('https://taken-1.example'));
    await activate(license.token, site('https://taken-2.example'));
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => activate(license.token, site(`https://racer-${i}.example`))));
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 409)).toHaveLength(49);
    for (const r of results.filter((x) => x.status === 409)) expect(r.body.error).toBe('site_limit_reached');
    const rows = await app.sql<{ n: string }>(
      `select count(distinct domain) as n from license_activations where license_id = $1 and status = 'active' and counts_slot`,
      [license.id],
    );
    expect(Number(rows[0]!.n)).toBe(3);
  });

  it('50 concurrent activations of one new site give one activation, the rest reactivations', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const s = site('https://stampede.example');
    const results = await Promise.all(Array.from({ length: 50 }, () => activate(license.token, s)));
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(new Set(results.map((r) => r.body.data.activation_id)).size).toBe(1);
    expect(results.filter((r) => r.body.data.reactivated === true)).toHaveLength(49);
  });
});

describe('management API', () => {
  it('issues long random tokens, distinct random reference ids, and stores only the token hash', async () => {
    const a = await issueLicense(app);
    const b = await issueLicense(app);
    expect(a.token.length).toBeGreaterThanOrEqual(40);
    expect(a.token).not.toBe(b.token);
    expect(a.reference_id).toMatch(/^lic_[a-z2-7]{20}$/);
    expect(a.reference_id).not.toBe(b.reference_id);
    expect(a.token).not.toContain(a.reference_id.slice(4));
    const rows = await app.sql('select * from licenses where id = $1', [a.id]);
    expect(JSON.stringify(rows)).not.toContain(a.token);
    expect(rows[0]).toMatchObject({ token_hash: createHash('sha256').update(a.token).digest('hex'), token_hint: a.token.slice(-4) });
    // Never shown again after issuing.
    const shown = await app.admin.get(`/api/management/v1/licenses/${a.id}`);
    expect(shown.body.data.token).toBeUndefined();
    expect(shown.text).not.toContain(a.token);
  });

  it('validates what it issues', async () => {
    const bad = await app.admin.post('/api/management/v1/licenses', {
      product_slug: 'Bad Slug',
      product_name: '',
      domain_limit: 0,
      expires_at: '2027-02-30',
      status: 'gold',
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('validation_failed');
    expect(bad.body.data.errors.map((e: { field: string }) => e.field).sort()).toEqual([
      'domain_limit',
      'expires_at',
      'product_name',
      'product_slug',
      'status',
    ]);
    const dateOnly = await issueLicense(app, { expires_at: '2030-01-31' });
    expect(dateOnly.expires_at).toBe('2030-01-31T23:59:59.000Z');
    const spaced = await issueLicense(app, { expires_at: '2030-01-31 10:00:00' });
    expect(spaced.expires_at).toBe('2030-01-31T10:00:00.000Z');
  });

  it('lists with filters and pagination', async () => {
    const slug = `filter-${Date.now()}`;
    const made = [];
    for (const status of ['active', 'revoked', 'active']) made.push(await issueLicense(app, { product_slug: slug, product_name: 'Filter Product', status }));
    const all = await app.admin.get(`/api/management/v1/licenses?product_slug=${slug}`);
    expect(all.status).toBe(200);
    expect(all.body.data).toMatchObject({ total: 3, page: 1, per_page: 20 });
    expect(all.body.data.items.map((i: { id: number }) => i.id)).toEqual(made.map((m) => m.id).reverse());
    const revoked = await app.admin.get(`/api/management/v1/licenses?product_slug=${slug}&status=revoked`);
    expect(revoked.body.data.items.map((i: { id: number }) => i.id)).toEqual([made[1]!.id]);
    const paged = await app.admin.get(`/api/management/v1/licenses?product_slug=${slug}&per_page=2&page=2`);
    expect(paged.body.data).toMatchObject({ total: 3, page: 2, per_page: 2 });
    expect(paged.body.data.items).toHaveLength(1);
    for (const q of [made[0]!.reference_id, made[0]!.token]) {
      const found = await app.admin.get(`/api/management/v1/licenses?q=${encodeURIComponent(q)}`);
      expect(found.body.data.items.map((i: { id: number }) => i.id)).toEqual([made[0]!.id]);
    }
    const byName = await app.admin.get(`/api/management/v1/licenses?q=filter%20prod&product_slug=${slug}`);
    expect(byName.body.data.total).toBe(3);
    for (const query of ['per_page=101', 'page=0', 'status=gold', 'sort=id']) {
      expect((await app.admin.get(`/api/management/v1/licenses?${query}`)).status, query).toBe(400);
    }
  });

  it('gets, patches status, expiry and limit, and lists activations', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const s = site('https://managed.example', 'secret');
    await activate(license.token, { ...s, wp_version: '6.6' });
    const got = await app.admin.get(`/api/management/v1/licenses/${license.id}`);
    expect(got.body.data).toMatchObject({ id: license.id, reference_id: license.reference_id, status: 'active', domain_limit: 1, active_domains: 1 });

    const raised = await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { domain_limit: 2, expires_at: '2032-01-01T00:00:00Z' });
    expect(raised.status).toBe(200);
    expect(raised.body.data).toMatchObject({ domain_limit: 2, expires_at: '2032-01-01T00:00:00.000Z' });
    expect((await activate(license.token, site('https://second-site.example'))).status).toBe(200);
    expect((await verify(license.token)).body.expires_at).toBe('2032-01-01 00:00:00');

    const revoked = await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked', expires_at: null });
    expect(revoked.body.data).toMatchObject({ status: 'revoked', expires_at: null });
    expect((await verify(license.token)).body.error).toBe('license_inactive');
    await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'active' });
    expect((await verify(license.token)).status).toBe(200);

    const listed = await app.admin.get(`/api/management/v1/licenses/${license.id}/activations`);
    expect(listed.status).toBe(200);
    expect(listed.body.data.total).toBe(2);
    expect(listed.body.data.items.find((a: { site_fingerprint: string }) => a.site_fingerprint === s.site_fingerprint)).toMatchObject({
      site_url: 'https://managed.example',
      domain: 'managed.example',
      wp_version: '6.6',
      status: 'active',
      deactivated_at: null,
    });
    await deactivate(license.token, { site_fingerprint: s.site_fingerprint });
    const inactive = await app.admin.get(`/api/management/v1/licenses/${license.id}/activations?status=deactivated`);
    expect(inactive.body.data.items).toHaveLength(1);
    expect(inactive.body.data.items[0].deactivated_at).toEqual(expect.any(String));

    expect((await app.admin.patch(`/api/management/v1/licenses/${license.id}`, {})).status).toBe(400);
    expect((await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { token: 'x' })).status).toBe(400);
    expect((await app.admin.get('/api/management/v1/licenses/999999')).status).toBe(404);
    expect((await app.admin.get('/api/management/v1/licenses/999999/activations')).status).toBe(404);
    expect((await app.admin.patch('/api/management/v1/licenses/999999', { status: 'active' })).status).toBe(404);
  });

  it('needs svc_manage_licenses: 403 for an editor, 401 without credentials', async () => {
    const editor = await app.createUser('editor');
    const license = await issueLicense(app);
    const calls = [
      (c: typeof app.admin) => c.post('/api/management/v1/licenses', { product_slug: 'x', product_name: 'X', domain_limit: 1 }),
      (c: typeof app.admin) => c.get('/api/management/v1/licenses'),
      (c: typeof app.admin) => c.get(`/api/management/v1/licenses/${license.id}`),
      (c: typeof app.admin) => c.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked' }),
      (c: typeof app.admin) => c.get(`/api/management/v1/licenses/${license.id}/activations`),
    ];
    for (const call of calls) {
      const denied = await call(editor.client);
      expect(denied.status).toBe(403);
      expect(denied.body).toMatchObject({ error: 'forbidden', data: { capability: 'svc_manage_licenses' } });
      expect((await call(app.anonymous)).status).toBe(401);
    }
    expect((await licenseState(license.id)).status).toBe('active');
  });
});

describe('svc license', () => {
  it('create --json prints one JSON object whose token then works through the API; show and revoke', async () => {
    const env = { DATABASE_URL: app.databaseUrl, LOG_LEVEL: 'warn' };
    const created = await runCli(
      [
        'license',
        'create',
        '--product-slug',
        'cli-product',
        '--product-name',
        'CLI Product',
        '--domain-limit',
        '2',
        '--expires-at',
        '2033-03-03 03:03:03',
        '--json',
      ],
      env,
    );
    expect(created.code, created.stderr).toBe(0);
    const lines = created.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const issued = JSON.parse(lines[0]!);
    expect(issued).toMatchObject({ token: expect.any(String), reference_id: expect.stringMatching(/^lic_/), status: 'active', domain_limit: 2 });

    const res = await verify(issued.token);
    expect(res.body).toMatchObject({
      status: 'ok',
      expires_at: '2033-03-03 03:03:03',
      domain_limit: 2,
      product_slug: 'cli-product',
      product_name: 'CLI Product',
    });

    const shown = await runCli(['license', 'show', issued.reference_id, '--json'], env);
    expect(JSON.parse(shown.stdout)).toMatchObject({ id: issued.id, status: 'active' });
    expect(shown.stdout).not.toContain(issued.token);

    const revoked = await runCli(['license', 'revoke', '--key', issued.token, '--json'], env);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(JSON.parse(revoked.stdout)).toMatchObject({ id: issued.id, status: 'revoked' });
    expect((await verify(issued.reference_id)).body.error).toBe('license_inactive');

    const human = await runCli(['license', 'create', '--product-slug', 'cli-product', '--product-name', 'CLI Product', '--domain-limit', '1'], env);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/token: \S{40,}/);
  });

  it('fails with a JSON error for bad input or an unknown key', async () => {
    const env = { DATABASE_URL: app.databaseUrl, LOG_LEVEL: 'warn' };
    const missing = await runCli(['license', 'create', '--product-slug', 'x', '--product-name', 'X', '--json'], env);
    expect(missing.code).toBe(1);
    expect(JSON.parse(missing.stdout)).toMatchObject({ status: 'fail', message: '--domain-limit is required' });
    const bad = await runCli(['license', 'create', '--product-slug', 'x', '--product-name', 'X', '--domain-limit', 'many', '--status', 'gold', '--json'], env);
    expect(JSON.parse(bad.stdout)).toMatchObject({ status: 'fail', error: 'validation_failed' });
    expect(
      JSON.parse(bad.stdout)
        .data.errors.map((e: { field: string }) => e.field)
        .sort(),
    ).toEqual(['--domain-limit', '--status']);
    const unknown = await runCli(['license', 'show', 'lic_aaaaaaaaaaaaaaaaaaaa', '--json'], env);
    expect(unknown.code).toBe(1);
    expect(JSON.parse(unknown.stdout)).toMatchObject({ status: 'fail', error: 'license_not_found' });
  });
});
