import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LicenseClient, LicenseRequestError, type EditionState } from '../src/licenses/client.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { issueLicense, site } from './helpers/licenses.js';
import { freePort } from './helpers/ports.js';

let app: TestApp;
const servers: Server[] = [];

beforeAll(async () => {
  app = await startTestApp({ env: { SVC_LICENSE_RATE_LIMIT: '100000' } });
});
afterAll(async () => {
  for (const server of servers) server.closeAllConnections();
  await Promise.all(servers.map((s) => new Promise((ok) => s.close(ok))));
  await app?.close();
});

/** A local HTTP server with a fixed behaviour (a broken proxy, a hung backend). */
async function fakeServer(handler: Parameters<typeof createServer>[1]): Promise<string> {
  const server = createServer(handler);
  servers.push(server);
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const address = server.address();
  return `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
}

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
      license: { license_status: 'active', expires_at: '2030-06-01 12:00:00', domain_limit: 1, site_match: true, product_slug: 'seo-suite', product_name: 'SEO Suite Pro' },
    });
    expect(client.state.edition).toBe('licensed');
    expect(saved.at(-1)?.edition).toBe('licensed');

    // The same licence and site, but the service is unreachable (nothing listens on the port).
    const closedPort = await freePort();
    const offline = new LicenseClient({ baseUrl: `http://127.0.0.1:${closedPort}`, key: license.token, siteFingerprint: s.site_fingerprint, state: client.state });
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
    await new LicenseClient({ baseUrl: app.url, key: license.token, siteFingerprint: site('https://a.example').site_fingerprint }).activate({ siteUrl: 'https://a.example' });
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
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '30' }).end(JSON.stringify({ status: 'fail', error: 'rate_limited', message: 'slow down' })),
    );
    const hung = await fakeServer(() => undefined);
    for (const baseUrl of [gateway, notFoundPage, limited, hung]) {
      const client = new LicenseClient({ baseUrl, key: 'any-key', siteFingerprint: 'f'.repeat(64), state, timeoutMs: 500 });
      const outcome = await client.verify();
      expect(outcome.kind, baseUrl).toBe('no_news');
      expect(client.state).toBe(state);
    }
  });
});
