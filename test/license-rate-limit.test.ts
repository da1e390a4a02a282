import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';
import { issueLicense, portal, site } from './helpers/licenses.js';

// Two API instances (separate pools and limiters) on one database with the default limit (60 per minute per address), and a
// third behind a "proxy" (TRUST_PROXY) with a small limit.
let first: TestApp;
let second: TestApp;
let proxied: TestApp;

beforeAll(async () => {
  first = await startTestApp();
  // Processes of one deployment share the service key (the licence signing key is sealed under it).
  const key = first.config.SVC_ENCRYPTION_KEY!;
  second = await startTestApp({ databaseUrl: first.databaseUrl, env: { SVC_ENCRYPTION_KEY: key } });
  proxied = await startTestApp({ databaseUrl: first.databaseUrl, env: { SVC_ENCRYPTION_KEY: key, TRUST_PROXY: 'true', SVC_LICENSE_RATE_LIMIT: '5' } });
});
afterAll(async () => {
  await proxied?.close();
  await second?.close();
  await first?.close();
});

// The limit is a sliding window: a request counts for the 60 s after it was made, whenever the
// burst starts, so a burst needs no particular moment of the minute.

describe('licence endpoint rate limit', () => {
  it('shares one count of 60 per minute per address across two API instances and all three endpoints', async () => {
    const license = await issueLicense(first);
    const s = site('https://counted.example');
    const calls = [];
    for (let i = 0; i < 60; i++) {
      const app = i % 2 ? second : first;
      const action = (['verify', 'activate', 'deactivate'] as const)[i % 3]!;
      // Successes, refusals and malformed requests all count.
      const form = action === 'verify' ? {} : i % 5 === 0 ? {} : s;
      calls.push(portal(app.anonymous, i % 7 === 0 ? 'unknown-key' : license.token, action, form));
    }
    const statuses = (await Promise.all(calls)).map((r) => r.status);
    expect(statuses).not.toContain(429);
    for (const [app, action] of [
      [first, 'verify'],
      [second, 'activate'],
      [first, 'deactivate'],
    ] as const) {
      const res = await portal(app.anonymous, license.token, action, action === 'verify' ? {} : s);
      expect(res.status).toBe(429);
      expect(res.body).toMatchObject({ status: 'fail', error: 'rate_limited' });
      const retryAfter = Number(res.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
    }
    // Past the limit the answer is 429 whatever the key or body would have given (verify's lookup
    // runs alongside the count, but never answers for it).
    for (const res of [
      await portal(first.anonymous, 'unknown-key', 'verify'),
      await portal(second.anonymous, license.token, 'verify', { unknown_field: 'x' }),
      await portal(first.anonymous, license.token, 'activate', {}),
    ]) {
      expect(res.status).toBe(429);
    }
    // Without TRUST_PROXY a forwarded address is ignored: the caller is still 127.0.0.1.
    const spoofed = await portal(second.anonymous, license.token, 'verify', {}, { 'x-forwarded-for': '198.51.100.1' });
    expect(spoofed.status).toBe(429);
    // Other surfaces are not limited by it.
    expect((await first.admin.get('/api/auth/v1/me')).status).toBe(200);
  });

  it('with TRUST_PROXY counts the address from X-Forwarded-For (its last hop)', async () => {
    const license = await issueLicense(first);
    const from = (ip: string) => portal(proxied.anonymous, license.token, 'verify', {}, { 'x-forwarded-for': ip });
    for (let i = 0; i < 5; i++) expect((await from('203.0.113.5')).status).toBe(200);
    const limited = await from('203.0.113.5');
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    // A client cannot escape by prepending its own hop: the proxy appends the real address last.
    expect((await from('192.0.2.99, 203.0.113.5')).status).toBe(429);
    expect((await from('203.0.113.6')).status).toBe(200);
    expect((await from('192.0.2.99, 203.0.113.7')).status).toBe(200);
    // Each request is counted once in the metrics, by its answer.
    const metrics = await (await fetch(`${proxied.url}/metrics`)).text();
    const verify = (outcome: string) =>
      Number(new RegExp(`^svc_license_requests_total\\{endpoint="verify",outcome="${outcome}"\\} (\\d+)$`, 'm').exec(metrics)?.[1] ?? 0);
    expect({ ok: verify('ok'), rate_limited: verify('rate_limited') }).toEqual({ ok: 7, rate_limited: 2 });
  });
});
