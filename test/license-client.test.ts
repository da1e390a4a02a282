import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LicenseClient, LicenseNetworkError, LicenseRequestError, type EditionState, type TrustedKey } from '../clients/typescript/src/index.js';
import { canonicalAnswer, canonicalKey, isoSeconds, keyIdOf, signText } from '../src/licenses/license.signature.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { fixedServers } from './helpers/http-target.js';
import { issueLicense, portal, site } from './helpers/licenses.js';
import { freePort } from './helpers/ports.js';

let app: TestApp;
const fixed = fixedServers();
const fakeServer = fixed.start;

beforeAll(async () => {
  app = await startTestApp({ env: { SVC_LICENSE_RATE_LIMIT: '100000' } });
});
afterAll(async () => {
  await fixed.closeAll();
  await app?.close();
});

describe('LicenseClient against the real server', () => {
  it('activates, verifies to licensed, and keeps the edition through a server that is down', async () => {
    const license = await issueLicense(app, { domain_limit: 1, expires_at: '2030-06-01T12:00:00Z' });
    const s = site('https://client.example');
    const saved: EditionState[] = [];
    const client = new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: s.site_fingerprint, onChange: (st) => void saved.push(st) });
    expect(client.state.edition).toBe('unknown');

    const activation = await client.activate({ siteUrl: s.site_url, wpVersion: '6.6', pluginVersion: '1.2.3' });
    expect(activation).toEqual({ activationId: expect.any(String), reactivated: false });
    expect((await client.activate({ siteUrl: s.site_url })).reactivated).toBe(true);

    const outcome = await client.verify();
    expect(outcome).toEqual({
      kind: 'valid',
      license: {
        license_status: 'active',
        expires_at: '2030-06-01 12:00:00',
        domain_limit: 1,
        site_match: true,
        product_slug: 'seo-suite',
        product_name: 'SEO Suite Pro',
      },
    });
    expect(client.state.edition).toBe('licensed');
    expect(saved.at(-1)?.edition).toBe('licensed');

    // The same licence and site, but the service is unreachable (nothing listens on the port).
    const closedPort = await freePort();
    const offline = new LicenseClient({
      baseUrl: `http://127.0.0.1:${closedPort}`,
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      state: client.state,
    });
    const noNews = await offline.verify();
    expect(noNews.kind).toBe('no_news');
    expect(offline.state).toEqual(client.state);
    expect(offline.state.edition).toBe('licensed');
  });

  it('moves to unlicensed only on a definitive refusal', async () => {
    const license = await issueLicense(app);
    const s = site('https://refused.example');
    const client = new LicenseClient({ baseUrl: app.url, key: license.reference_id, siteFingerprint: s.site_fingerprint });
    await client.activate({ siteUrl: s.site_url });
    expect((await client.verify()).kind).toBe('valid');
    await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked' });
    const refused = await client.verify();
    expect(refused).toEqual({ kind: 'refused', error: 'license_inactive', message: expect.any(String) });
    expect(client.state).toMatchObject({ edition: 'unlicensed', error: 'license_inactive' });

    const unknown = new LicenseClient({ baseUrl: app.url, key: 'not-a-real-key', state: { edition: 'licensed' } });
    expect(await unknown.verify()).toMatchObject({ kind: 'refused', error: 'license_not_found' });
    expect(unknown.state.edition).toBe('unlicensed');
  });

  it('says unlicensed for a usable licence this site is not active on, and after deactivating', async () => {
    const license = await issueLicense(app);
    const s = site('https://not-yet.example');
    const client = new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: s.site_fingerprint });
    expect(await client.verify()).toMatchObject({ kind: 'valid', license: { site_match: false } });
    expect(client.state.edition).toBe('unlicensed');
    await client.activate({ siteUrl: s.site_url });
    await client.verify();
    expect(client.state.edition).toBe('licensed');
    expect(await client.deactivate()).toEqual({ activationId: expect.any(String), slotFreed: true });
    expect(client.state.edition).toBe('unlicensed');
    // Without a fingerprint the client asks about the licence only.
    const anySite = new LicenseClient({ baseUrl: app.url, key: license.token });
    await anySite.verify();
    expect(anySite.state.edition).toBe('licensed');
  });

  it('throws a typed error for refused activations and deactivations', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    await new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: site('https://a.example').site_fingerprint }).activate({
      siteUrl: 'https://a.example',
    });
    const b = site('https://b.example');
    const client = new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: b.site_fingerprint });
    const error = await client.activate({ siteUrl: b.site_url }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LicenseRequestError);
    expect(error).toMatchObject({ status: 409, code: 'site_limit_reached', data: { site_limit: 1 } });
    await expect(client.deactivate()).rejects.toMatchObject({ status: 404, code: 'activation_not_found' });
  });

  it('treats a 5xx, a non-JSON page, a rate limit and a hung server as no news', async () => {
    const state: EditionState = { edition: 'licensed', checkedAt: '2026-01-01T00:00:00.000Z' };
    const gateway = await fakeServer((_req, res) => res.writeHead(502, { 'content-type': 'text/html' }).end('<h1>Bad gateway</h1>'));
    const notFoundPage = await fakeServer((_req, res) => res.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not found</h1>'));
    const limited = await fakeServer((_req, res) =>
      res
        .writeHead(429, { 'content-type': 'application/json', 'retry-after': '30' })
        .end(JSON.stringify({ status: 'fail', error: 'rate_limited', message: 'slow down' })),
    );
    const hung = await fakeServer(() => undefined);
    for (const baseUrl of [gateway, notFoundPage, limited, hung]) {
      const client = new LicenseClient({ baseUrl, key: 'any-key', siteFingerprint: 'f'.repeat(64), state, timeoutMs: 500 });
      const outcome = await client.verify();
      expect(outcome.kind, baseUrl).toBe('no_news');
      expect(client.state).toBe(state);
    }
    // Activate and deactivate: a server error in the service's own envelope is no answer either.
    const unavailable = await fakeServer((_req, res) =>
      res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 'fail', error: 'service_unavailable', message: 'down' })),
    );
    const client = new LicenseClient({ baseUrl: unavailable, key: 'any-key', siteFingerprint: 'f'.repeat(64), state });
    await expect(client.activate({ siteUrl: 'https://down.example' })).rejects.toBeInstanceOf(LicenseNetworkError);
    await expect(client.deactivate()).rejects.toBeInstanceOf(LicenseNetworkError);
    expect(client.state).toBe(state);
  });
});

/** The service's keys as a vendor pins them (`svc license keys`). */
async function pinnedKeys(): Promise<TrustedKey[]> {
  const res = await app.anonymous.get('/api/portal/v1/keys');
  return res.body.data.items.map((k: TrustedKey) => ({ key_id: k.key_id, public_key: k.public_key }));
}

/** An Ed25519 key that is not the service's: what a forger has. */
function forgerKey() {
  const pair = generateKeyPairSync('ed25519');
  const raw = Buffer.from(pair.publicKey.export({ format: 'jwk' }).x!, 'base64url');
  return { privateKey: pair.privateKey, key_id: keyIdOf(raw), public_key: raw.toString('base64') };
}

describe('LicenseClient and signed answers', () => {
  it('trusts a signed answer offline for the grace period, never beyond the signature, and not after the licence expires', async () => {
    const license = await issueLicense(app, { expires_at: '2030-06-01T12:00:00Z' });
    const s = site('https://grace.example');
    const keys = await pinnedKeys();
    const client = new LicenseClient({
      baseUrl: app.url,
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      trustedKeys: keys,
      graceSeconds: 3 * 86_400,
    });
    await client.activate({ siteUrl: s.site_url });
    // activate's signed answer already makes the site licensed.
    expect(client.state).toMatchObject({ edition: 'licensed', answer: { action: 'activate', license: { site_match: true } } });
    expect((await client.verify()).kind).toBe('valid');
    const issued = Date.parse(client.state.answer!.signature.issued_at);

    const closedPort = await freePort();
    const at = (ms: number) => () => new Date(ms);
    const offline = (graceSeconds: number, now: number) =>
      new LicenseClient({
        baseUrl: `http://127.0.0.1:${closedPort}`,
        key: license.token,
        siteFingerprint: s.site_fingerprint,
        trustedKeys: keys,
        graceSeconds,
        state: client.state,
        now: at(now),
      });
    const withinGrace = offline(3 * 86_400, issued + 3 * 86_400_000 - 1000);
    expect(await withinGrace.verify()).toMatchObject({ kind: 'no_news' });
    expect(withinGrace.state).toBe(client.state);
    expect(withinGrace.edition()).toBe('licensed');
    expect(offline(3 * 86_400, issued + 3 * 86_400_000 + 1000).edition()).toBe('unknown');
    // The signature's own validity (30 days by default) caps a longer grace period.
    const validUntil = Date.parse(client.state.answer!.signature.valid_until);
    expect(validUntil - issued).toBe(30 * 86_400_000);
    expect(offline(365 * 86_400, validUntil - 1000).edition()).toBe('licensed');
    expect(offline(365 * 86_400, validUntil + 1000).edition()).toBe('unknown');
    // A signed answer is no use after the licence's own expiry.
    await app.sql(`update licenses set expires_at = now() + interval '2 days' where id = $1`, [license.id]);
    await client.verify();
    expect(offline(365 * 86_400, Date.now() + 86_400_000).edition()).toBe('licensed');
    expect(offline(365 * 86_400, Date.now() + 3 * 86_400_000).edition()).toBe('unknown');
  });

  it('refuses a tampered cache', async () => {
    const license = await issueLicense(app, { domain_limit: 1, expires_at: '2028-01-01T00:00:00Z' });
    const s = site('https://tampered.example');
    const keys = await pinnedKeys();
    const client = new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: s.site_fingerprint, trustedKeys: keys });
    await client.activate({ siteUrl: s.site_url });
    await client.verify();
    const saved: EditionState = JSON.parse(JSON.stringify(client.state));
    const reload = (state: EditionState, options: { key?: string; siteFingerprint?: string } = {}) =>
      new LicenseClient({
        baseUrl: app.url,
        key: options.key ?? license.token,
        siteFingerprint: options.siteFingerprint ?? s.site_fingerprint,
        trustedKeys: keys,
        state,
      }).edition();
    expect(reload(saved)).toBe('licensed');
    const answer = saved.answer!;
    const tampered: EditionState[] = [
      { ...saved, answer: { ...answer, license: { ...answer.license, expires_at: '2099-01-01 00:00:00' } } },
      { ...saved, answer: { ...answer, license: { ...answer.license, domain_limit: 100 } } },
      { ...saved, answer: { ...answer, signature: { ...answer.signature, valid_until: isoSeconds(new Date(Date.now() + 10 * 365 * 86_400_000)) } } },
      { ...saved, answer: { ...answer, signature: { ...answer.signature, issued_at: isoSeconds(new Date(Date.parse(answer.signature.issued_at) - 60_000)) } } },
      { ...saved, answer: { ...answer, signature: { ...answer.signature, value: Buffer.alloc(64, 7).toString('base64') } } },
      // The edition flag alone, without the answer that justifies it.
      { edition: 'licensed', license: answer.license, checkedAt: saved.checkedAt! },
    ];
    for (const [index, state] of tampered.entries()) expect(reload(state), `tampering ${index}`).toBe('unknown');
    // An answer for one licence or site does not license another.
    expect(reload(saved, { key: license.reference_id })).toBe('unknown');
    expect(reload(saved, { siteFingerprint: site('https://elsewhere.example').site_fingerprint })).toBe('unknown');

    // A cache re-signed by a forger, who also planted his key among the learnt ones, is refused too.
    const forger = forgerKey();
    const head = { ...answer.signature, key_id: forger.key_id };
    const { value: _value, ...unsigned } = head;
    const forged = {
      ...answer,
      license: { ...answer.license, expires_at: '2099-01-01 00:00:00' },
      signature: {
        ...head,
        value: signText(
          canonicalAnswer(
            {
              action: answer.action,
              licenseKey: license.token,
              siteFingerprint: s.site_fingerprint,
              license: { ...answer.license, expires_at: '2099-01-01 00:00:00' },
              ...(answer.activation ? { activation: answer.activation } : {}),
            },
            unsigned,
          ),
          forger.privateKey,
        ),
      },
    };
    const planted = {
      key_id: forger.key_id,
      public_key: forger.public_key,
      created_at: isoSeconds(new Date()),
      endorsement: {
        key_id: keys[0]!.key_id,
        value: signText(canonicalKey({ key_id: forger.key_id, public_key: forger.public_key, created_at: isoSeconds(new Date()) }), forger.privateKey),
      },
    };
    expect(reload({ ...saved, answer: forged, keys: [...(saved.keys ?? []), planted] })).toBe('unknown');
  });

  it('refuses a forged local response: unsigned, signed by another key, or signed for another licence', async () => {
    const license = await issueLicense(app);
    const other = await issueLicense(app);
    const s = site('https://forged.example');
    const keys = await pinnedKeys();
    const real = new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: s.site_fingerprint, trustedKeys: keys });
    await real.activate({ siteUrl: s.site_url });
    const state: EditionState = { edition: 'unlicensed', error: 'license_inactive', checkedAt: '2026-01-01T00:00:00.000Z' };

    const forger = forgerKey();
    const license200 = {
      license_status: 'active' as const,
      expires_at: '2099-12-31 23:59:59',
      domain_limit: 100,
      site_match: true,
      product_slug: 'seo-suite',
      product_name: 'SEO Suite Pro',
    };
    const head = {
      alg: 'ed25519' as const,
      key_id: forger.key_id,
      issued_at: isoSeconds(new Date()),
      valid_until: isoSeconds(new Date(Date.now() + 86_400_000)),
    };
    const forgedSignature = {
      ...head,
      value: signText(
        canonicalAnswer({ action: 'verify', licenseKey: license.token, siteFingerprint: s.site_fingerprint, license: license200 }, head),
        forger.privateKey,
      ),
    };
    // A real, correctly signed answer of the service, for another licence this site is active on, replayed.
    expect((await portal(app.anonymous, other.token, 'activate', s)).status).toBe(200);
    const replayed = (await portal(app.anonymous, other.token, 'verify', { site_fingerprint: s.site_fingerprint })).body;
    expect(replayed).toMatchObject({ site_match: true, signature: { key_id: keys[0]!.key_id } });
    const forgedKeys = {
      status: 'ok',
      data: {
        items: [
          {
            key_id: forger.key_id,
            alg: 'ed25519',
            public_key: forger.public_key,
            status: 'current',
            created_at: head.issued_at,
            retired_at: null,
            valid_until: null,
            endorsement: null,
          },
        ],
      },
    };
    const answers = [{ status: 'ok', ...license200 }, { status: 'ok', ...license200, signature: forgedSignature }, replayed];
    for (const body of answers) {
      const fake = await fakeServer((req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(req.url === '/api/portal/v1/keys' ? forgedKeys : body));
      });
      const client = new LicenseClient({ baseUrl: fake, key: license.token, siteFingerprint: s.site_fingerprint, trustedKeys: keys, state });
      expect(await client.verify()).toEqual({ kind: 'no_news', reason: expect.stringContaining('not signed by a trusted key') });
      expect(client.state).toBe(state);
      expect(client.edition()).toBe('unlicensed');
      const activation = { status: 'ok', data: { activation_id: 'act_forged', license: license200, signature: forgedSignature } };
      const fakeActivate = await fakeServer((req, res) =>
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(req.url === '/api/portal/v1/keys' ? forgedKeys : activation)),
      );
      const activating = new LicenseClient({ baseUrl: fakeActivate, key: license.token, siteFingerprint: s.site_fingerprint, trustedKeys: keys, state });
      await expect(activating.activate({ siteUrl: s.site_url })).rejects.toBeInstanceOf(LicenseNetworkError);
      expect(activating.state).toBe(state);
    }
  });

  it('takes no replayed answer for news: an old signed answer neither undoes a revocation nor replaces a newer answer', async () => {
    const license = await issueLicense(app);
    const s = site('https://replayed.example');
    const keys = await pinnedKeys();
    const client = new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: s.site_fingerprint, trustedKeys: keys });
    await client.activate({ siteUrl: s.site_url });
    // A genuine verify answer of the service, recorded by whoever sits between the site and it.
    const recorded = (await portal(app.anonymous, license.token, 'verify', { site_fingerprint: s.site_fingerprint })).body;
    expect(recorded).toMatchObject({ site_match: true, signature: { key_id: keys[0]!.key_id } });
    const replaying = async (body: unknown) => fakeServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body)));

    // Ten minutes after the recording, the licence is revoked and the client hears it; then the
    // recorded answer is played back.
    expect((await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked' })).status).toBe(200);
    const later = new Date(Date.now() + 10 * 60_000);
    const hearing = new LicenseClient({
      baseUrl: app.url,
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      trustedKeys: keys,
      state: client.state,
      now: () => later,
    });
    expect(await hearing.verify()).toMatchObject({ kind: 'refused', error: 'license_inactive' });
    const afterRevocation = new LicenseClient({
      baseUrl: await replaying(recorded),
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      trustedKeys: keys,
      state: hearing.state,
      now: () => later,
    });
    expect(await afterRevocation.verify()).toMatchObject({ kind: 'no_news', reason: expect.stringContaining('out of date') });
    expect(afterRevocation.edition()).toBe('unlicensed');

    // A client that keeps a newer answer does not go back to an older one either.
    const newer = { ...recorded, signature: { ...recorded.signature, issued_at: isoSeconds(new Date(Date.now() + 60_000)) } };
    const keeping = new LicenseClient({
      baseUrl: await replaying(recorded),
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      trustedKeys: keys,
      state: { edition: 'licensed', answer: { action: 'verify', license: newer, signature: newer.signature }, checkedAt: new Date().toISOString() },
    });
    expect(await keeping.verify()).toMatchObject({ kind: 'no_news' });

    // An answer past its signature's validity is no news, whatever the client kept.
    const expired = new LicenseClient({
      baseUrl: await replaying(recorded),
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      trustedKeys: keys,
      now: () => new Date(Date.parse(recorded.signature.valid_until) + 1000),
    });
    expect(await expired.verify()).toMatchObject({ kind: 'no_news', reason: expect.stringContaining('out of date') });
    expect(expired.state.edition).toBe('unknown');
  });

  it('learns a rotated key through its endorsement, and keeps trusting it from the cache', async () => {
    const license = await issueLicense(app);
    const s = site('https://rotated.example');
    const pinned = await pinnedKeys();
    const client = new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: s.site_fingerprint, trustedKeys: pinned });
    await client.activate({ siteUrl: s.site_url });
    const { current } = await app.stack.services.licenseKeys.rotate();
    expect(await client.verify()).toMatchObject({ kind: 'valid' });
    expect(client.state.answer!.signature.key_id).toBe(current.key_id);
    expect(client.state.keys!.map((k) => k.key_id)).toContain(current.key_id);
    // A client restarted with the saved state checks the endorsement again from the pinned key.
    const restarted = new LicenseClient({
      baseUrl: app.url,
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      trustedKeys: pinned,
      state: JSON.parse(JSON.stringify(client.state)),
    });
    expect(restarted.edition()).toBe('licensed');
    // Pinned to an unrelated key, the same answer is not trusted.
    const stranger = forgerKey();
    const unrelated = new LicenseClient({
      baseUrl: app.url,
      key: license.token,
      siteFingerprint: s.site_fingerprint,
      trustedKeys: [{ key_id: stranger.key_id, public_key: stranger.public_key }],
      state: client.state,
    });
    expect(unrelated.edition()).toBe('unknown');
    expect((await unrelated.verify()).kind).toBe('no_news');
  });
});

describe('the package a plugin author takes (clients/typescript)', () => {
  const dir = fileURLToPath(new URL('../clients/typescript/', import.meta.url));

  it('imports nothing but Node built-ins and its own files', async () => {
    const sources = (await readdir(join(dir, 'src'))).filter((f) => f.endsWith('.ts'));
    expect(sources.length).toBeGreaterThan(0);
    for (const file of sources) {
      const text = await readFile(join(dir, 'src', file), 'utf8');
      for (const [, from] of text.matchAll(/\bfrom '([^']+)'/g)) expect(from!, file).toMatch(/^(node:|\.\/[a-z-]+\.js$)/);
    }
  });

  it('builds with its own tsconfig into the files its package.json exports, and the build runs', async () => {
    const out = await mkdtemp(join(tmpdir(), 'license-client-'));
    try {
      await promisify(execFile)(process.execPath, [fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url)), '-p', dir, '--outDir', out], {
        timeout: 120_000,
      });
      const pkg = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8'));
      expect(pkg.name).toBe('@workflow-svc/license-client');
      for (const entry of Object.values<Record<string, string> | string>(pkg.exports)) {
        if (typeof entry === 'string') continue;
        for (const target of Object.values(entry)) await readFile(join(out, target.replace(/^\.\/dist\//, '')));
      }
      const built = await import(pathToFileURL(join(out, 'index.js')).href);
      expect(typeof built.LicenseClient).toBe('function');
      expect(new built.LicenseClient({ baseUrl: 'http://127.0.0.1:9', key: 'k' }).edition()).toBe('unknown');
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  });
});
