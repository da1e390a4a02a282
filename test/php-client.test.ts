import { createHash, generateKeyPairSync } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalAnswer, isoSeconds, keyIdOf, signText } from '../src/licenses/license.signature.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { fixedServers } from './helpers/http-target.js';
import { issueLicense, type IssuedLicense } from './helpers/licenses.js';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ensurePhp, phpClient, phpClientFile, runPhp } from './helpers/php.js';
import { freePort } from './helpers/ports.js';

/**
 * The PHP client (clients/php/LicenseClient.php), run by `php` against the real server, step by
 * step as a plugin lives: activate, reactivate, verify, the server stopped, a tampered cache, a
 * forged local response, key rotation, deactivate; then the WordPress storage, HTTP API and
 * WP-Cron helper through a stand-in for WordPress's functions.
 */
let app: TestApp;
let dir: string;
let license: IssuedLicense;
let pinned: { key_id: string; public_key: string }[];
const fixed = fixedServers();
const fakeServer = fixed.start;
const env = { SVC_LICENSE_RATE_LIMIT: '100000' };
const siteUrl = 'https://php-shop.example';

beforeAll(async () => {
  ensurePhp();
  dir = await mkdtemp(join(tmpdir(), 'svc-php-'));
  app = await startTestApp({ env });
  license = await issueLicense(app, { domain_limit: 1, expires_at: '2031-01-31T23:59:59Z' });
  const keys = await app.anonymous.get('/api/portal/v1/keys');
  pinned = keys.body.data.items.map((k: { key_id: string; public_key: string }) => ({ key_id: k.key_id, public_key: k.public_key }));
}, 900_000);
afterAll(async () => {
  await fixed.closeAll();
  await app?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const storage = () => join(dir, 'licence.json');
const readStorage = async () => JSON.parse(await readFile(storage(), 'utf8')) as { values: Record<string, string> };
const storedState = async () => JSON.parse((await readStorage()).values.state!);
const client = (action: string, extra: Record<string, unknown> = {}) =>
  phpClient({ action, base_url: app.url, key: license.token, storage: storage(), public_keys: pinned, ...extra });

describe('the PHP client file', () => {
  it('passes php -l', async () => {
    const lint = await runPhp(['-l', phpClientFile]);
    expect(lint.stdout + lint.stderr).toContain('No syntax errors detected');
    expect(lint.code).toBe(0);
  });

  it('builds the documented canonical form and checks its test vector with sodium', async () => {
    const answer = {
      action: 'verify',
      license: {
        license_status: 'active',
        expires_at: '2027-01-31 23:59:59',
        domain_limit: 3,
        site_match: true,
        product_slug: 'seo-suite',
        product_name: 'SEO Suite Pro — Ünïcode & more',
      },
      signature: {
        alg: 'ed25519',
        key_id: '9263a6de117af668',
        issued_at: '2026-11-22T10:00:00Z',
        valid_until: '2026-12-22T10:00:00Z',
        value: 'T8rS3Oc2EvLEUcqFq/zadPDEwoOMhkpuysZxqAAm0v1RLEWj4mJPn6czTUD7PNfn1Ure/RbCGum1jXSdKASrDA==',
      },
    };
    const vector = {
      action: 'vector',
      answer,
      license_key: 'lic_abcdefghijklmnopqrst',
      site_fingerprint: '3f1c' + '0'.repeat(60),
      public_key: 'JZEPHagyhXq0u+IZ7/3PCLEKovHzh5qpfrLbbD7itQc=',
    };
    const out = await phpClient(vector);
    expect(out.verified).toBe(true);
    expect(out.canonical).toBe(
      canonicalAnswer(
        { action: 'verify', licenseKey: vector.license_key, siteFingerprint: vector.site_fingerprint, license: answer.license as never },
        { alg: 'ed25519', key_id: answer.signature.key_id, issued_at: answer.signature.issued_at, valid_until: answer.signature.valid_until },
      ),
    );
    const altered = await phpClient({ ...vector, answer: { ...answer, license: { ...answer.license, domain_limit: 4 } } });
    expect(altered.verified).toBe(false);
  });
});

// One site's life with one licence, step by step: each test starts where the one before left the
// site (activated, verified, rotated, deactivated), so they run in this order even when shuffled.
describe('the PHP client against the real server', { shuffle: false }, () => {
  let activationId: string;

  it('activates: a signed answer makes the site licensed; the fingerprint is SHA-256 of the home URL and its stored secret', async () => {
    const out = await client('activate', { site_url: siteUrl, versions: { wp_version: '6.6.2', php_version: '8.2.0', plugin_version: '1.4.0' } });
    expect(out.refused ?? out.network_error).toBeUndefined();
    expect(out.result).toEqual({ activation_id: expect.stringMatching(/^act_/), reactivated: false });
    expect(out.edition).toBe('licensed');
    expect(out.license).toEqual({
      license_status: 'active',
      expires_at: '2031-01-31 23:59:59',
      domain_limit: 1,
      site_match: true,
      product_slug: 'seo-suite',
      product_name: 'SEO Suite Pro',
    });
    activationId = out.result.activation_id;

    const stored = await readStorage();
    expect(stored.values.site_secret).toMatch(/^[0-9a-f]{64}$/);
    const fingerprint = createHash('sha256')
      .update(siteUrl + stored.values.site_secret)
      .digest('hex');
    const activations = await app.admin.get(`/api/management/v1/licenses/${license.id}/activations`);
    expect(activations.body.data.items).toEqual([
      expect.objectContaining({
        activation_id: activationId,
        site_fingerprint: fingerprint,
        site_url: siteUrl,
        wp_version: '6.6.2',
        php_version: '8.2.0',
        plugin_version: '1.4.0',
        status: 'active',
      }),
    ]);
    expect((await storedState()).answer).toMatchObject({
      action: 'activate',
      activation: { activation_id: activationId },
      signature: { key_id: pinned[0]!.key_id },
    });
  });

  it('reactivates the same site without a new slot', async () => {
    const out = await client('activate', { site_url: siteUrl });
    expect(out.result).toEqual({ activation_id: activationId, reactivated: true });
    expect(out.edition).toBe('licensed');
    const state = await app.admin.get(`/api/management/v1/licenses/${license.id}`);
    expect(state.body.data.active_domains).toBe(1);
  });

  it('verifies: a signed answer for this site keeps it licensed', async () => {
    const out = await client('verify');
    expect(out.result).toEqual({ kind: 'valid', license: expect.objectContaining({ site_match: true, domain_limit: 1 }) });
    expect(out.edition).toBe('licensed');
    expect((await storedState()).answer.action).toBe('verify');
  });

  it('refuses another site over the limit with the code and the limit', async () => {
    const other = join(dir, 'other-site.json');
    const out = await phpClient({
      action: 'activate',
      base_url: app.url,
      key: license.token,
      storage: other,
      public_keys: pinned,
      site_url: 'https://another-shop.example',
    });
    expect(out.refused).toEqual({ status: 409, error: 'site_limit_reached', message: expect.any(String), data: { site_limit: 1 } });
    expect(out.edition).toBe('unknown');
  });

  it('with the server stopped, verify is no news and leaves the stored edition unchanged', async () => {
    const before = await readFile(storage(), 'utf8');
    const stoppedUrl = app.url;
    const databaseUrl = app.databaseUrl;
    const key = app.config.SVC_ENCRYPTION_KEY!;
    await app.close();
    try {
      const out = await phpClient({ action: 'verify', base_url: stoppedUrl, key: license.token, storage: storage(), public_keys: pinned });
      expect(out.result).toEqual({ kind: 'no_news', reason: 'the service could not be reached' });
      expect(out.edition).toBe('licensed');
      expect(await readFile(storage(), 'utf8')).toBe(before);
      await expect(
        phpClient({ action: 'activate', base_url: stoppedUrl, key: license.token, storage: storage(), public_keys: pinned, site_url: siteUrl }),
      ).resolves.toMatchObject({
        network_error: expect.stringContaining('could not be reached'),
        edition: 'licensed',
      });
    } finally {
      // The same service again, on its database and key, at a new address.
      app = await startTestApp({ databaseUrl, env: { ...env, SVC_ENCRYPTION_KEY: key } });
    }
    expect((await client('verify')).result.kind).toBe('valid');
  });

  it('treats a 5xx, a rate limit and a page that is not the protocol as no news', async () => {
    const before = await readFile(storage(), 'utf8');
    for (const [status, type, body] of [
      [503, 'application/json', JSON.stringify({ status: 'fail', error: 'service_unavailable', message: 'down' })],
      [429, 'application/json', JSON.stringify({ status: 'fail', error: 'rate_limited', message: 'slow down' })],
      [404, 'text/html', '<h1>Not found</h1>'],
      [200, 'text/html', '<h1>Welcome to nginx</h1>'],
    ] as const) {
      const url = await fakeServer((_req, res) => res.writeHead(status, { 'content-type': type }).end(body));
      const out = await phpClient({ action: 'verify', base_url: url, key: license.token, storage: storage(), public_keys: pinned });
      expect(out.result.kind, `${status} ${type}`).toBe('no_news');
      expect(out.edition).toBe('licensed');
    }
    expect(await readFile(storage(), 'utf8')).toBe(before);
  });

  it('refuses a tampered cached answer', async () => {
    const original = await readFile(storage(), 'utf8');
    const stored = JSON.parse(original);
    const state = JSON.parse(stored.values.state);
    const write = async (values: Record<string, string>) => writeFile(storage(), JSON.stringify({ ...stored, values: { ...stored.values, ...values } }));
    const tamperings: [string, Record<string, string>][] = [
      [
        'a later expiry',
        { state: JSON.stringify({ ...state, answer: { ...state.answer, license: { ...state.answer.license, expires_at: '2099-12-31 23:59:59' } } }) },
      ],
      ['a bigger limit', { state: JSON.stringify({ ...state, answer: { ...state.answer, license: { ...state.answer.license, domain_limit: 50 } } }) }],
      [
        'a longer validity',
        { state: JSON.stringify({ ...state, answer: { ...state.answer, signature: { ...state.answer.signature, valid_until: '2099-01-01T00:00:00Z' } } }) },
      ],
      [
        'another signature',
        {
          state: JSON.stringify({
            ...state,
            answer: { ...state.answer, signature: { ...state.answer.signature, value: Buffer.alloc(64, 1).toString('base64') } },
          }),
        },
      ],
      ['the edition flag without an answer', { state: JSON.stringify({ edition: 'licensed', keys: [] }) }],
      ['another site secret', { site_secret: 'f'.repeat(64) }],
      ['another home URL', { site_url: 'https://pirate.example' }],
    ];
    for (const [what, values] of tamperings) {
      await write(values);
      const out = await client('edition');
      expect(out.edition, what).toBe('unknown');
      expect(out.license, what).toBeNull();
    }
    await writeFile(storage(), original);
    expect((await client('edition')).edition).toBe('licensed');
  });

  it('refuses a forged local response: unsigned, signed by another key, or a real answer for another licence', async () => {
    const forger = generateKeyPairSync('ed25519');
    const raw = Buffer.from(forger.publicKey.export({ format: 'jwk' }).x!, 'base64url');
    const fingerprint = createHash('sha256')
      .update(siteUrl + (await readStorage()).values.site_secret)
      .digest('hex');
    const forged = {
      license_status: 'active' as const,
      expires_at: '2099-12-31 23:59:59',
      domain_limit: 999,
      site_match: true,
      product_slug: 'seo-suite',
      product_name: 'SEO Suite Pro',
    };
    const head = {
      alg: 'ed25519' as const,
      key_id: keyIdOf(raw),
      issued_at: isoSeconds(new Date()),
      valid_until: isoSeconds(new Date(Date.now() + 86_400_000)),
    };
    const signature = {
      ...head,
      value: signText(canonicalAnswer({ action: 'verify', licenseKey: license.token, siteFingerprint: fingerprint, license: forged }, head), forger.privateKey),
    };
    const forgerKeys = {
      status: 'ok',
      data: {
        items: [
          {
            key_id: head.key_id,
            alg: 'ed25519',
            public_key: raw.toString('base64'),
            status: 'current',
            created_at: head.issued_at,
            retired_at: null,
            valid_until: null,
            endorsement: null,
          },
        ],
      },
    };
    // A correctly signed answer of the real service about another licence.
    const other = await issueLicense(app, { domain_limit: 5 });
    await phpClient({
      action: 'activate',
      base_url: app.url,
      key: other.token,
      storage: join(dir, 'other-licence.json'),
      public_keys: pinned,
      site_url: siteUrl,
    });
    const replayed = (await app.anonymous.request('POST', `/api/portal/v1/licenses/${other.token}/verify`, { form: { site_fingerprint: fingerprint } })).body;

    const before = await readFile(storage(), 'utf8');
    for (const body of [{ status: 'ok', ...forged }, { status: 'ok', ...forged, signature }, replayed]) {
      const url = await fakeServer((req, res) =>
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(req.url === '/api/portal/v1/keys' ? forgerKeys : body)),
      );
      const out = await phpClient({ action: 'verify', base_url: url, key: license.token, storage: storage(), public_keys: pinned });
      expect(out.result).toEqual({ kind: 'no_news', reason: 'the answer is not signed by a trusted key' });
      expect(out.edition).toBe('licensed');
      expect(out.license.domain_limit).toBe(1);
    }
    const fakeActivate = await fakeServer((req, res) =>
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(
          JSON.stringify(req.url === '/api/portal/v1/keys' ? forgerKeys : { status: 'ok', data: { activation_id: 'act_forged', license: forged, signature } }),
        ),
    );
    const activated = await phpClient({
      action: 'activate',
      base_url: fakeActivate,
      key: license.token,
      storage: storage(),
      public_keys: pinned,
      site_url: siteUrl,
    });
    expect(activated.network_error).toContain('not signed by a trusted key');
    expect(await readFile(storage(), 'utf8')).toBe(before);
  });

  it('trusts the stored answer offline for the grace period the vendor sets, never beyond the signature', async () => {
    const { signature } = (await storedState()).answer;
    const issued = Date.parse(signature.issued_at) / 1000;
    const validUntil = Date.parse(signature.valid_until) / 1000;
    const at = (now: number, graceSeconds: number) => client('edition', { now, grace_seconds: graceSeconds });
    expect((await at(issued + 3 * 86_400 - 1, 3 * 86_400)).edition).toBe('licensed');
    expect((await at(issued + 3 * 86_400, 3 * 86_400)).edition).toBe('unknown');
    expect((await at(validUntil - 1, 365 * 86_400)).edition).toBe('licensed');
    expect((await at(validUntil, 365 * 86_400)).edition).toBe('unknown');
    // Nothing that old is trusted: a clock far behind the signature's time.
    expect((await at(issued - 3600, 3 * 86_400)).edition).toBe('unknown');
  });

  it('learns a rotated signing key through its endorsement', async () => {
    const { current } = await app.stack.services.licenseKeys.rotate();
    const out = await client('verify');
    expect(out.result.kind).toBe('valid');
    const state = await storedState();
    expect(state.answer.signature.key_id).toBe(current.key_id);
    expect(state.keys.map((k: { key_id: string }) => k.key_id)).toContain(current.key_id);
    expect((await client('edition')).edition).toBe('licensed');
  });

  it('deactivates, frees the slot and becomes unlicensed; deactivating again is refused', async () => {
    const out = await client('deactivate');
    expect(out.result).toEqual({ activation_id: activationId, slot_freed: true });
    expect(out.edition).toBe('unlicensed');
    expect(out.last_error).toBe('deactivated');
    expect((await app.admin.get(`/api/management/v1/licenses/${license.id}`)).body.data.active_domains).toBe(0);
    const again = await client('deactivate');
    expect(again.refused).toEqual({ status: 409, error: 'already_deactivated', message: expect.any(String), data: [] });
    const verified = await client('verify');
    expect(verified.result.kind).toBe('valid');
    expect(verified.edition).toBe('unlicensed');
  });

  it('moves to unlicensed on a definitive refusal', async () => {
    expect((await client('activate', { site_url: siteUrl })).edition).toBe('licensed');
    await app.admin.patch(`/api/management/v1/licenses/${license.id}`, { status: 'revoked' });
    const out = await client('verify');
    expect(out.result).toEqual({ kind: 'refused', error: 'license_inactive', message: expect.any(String) });
    expect(out.edition).toBe('unlicensed');
    expect(out.last_error).toBe('license_inactive');
  });
});

describe('the PHP client and a replayed answer', () => {
  it('takes an old signed answer played back after a revocation for no news: the site stays unlicensed', async () => {
    const revocable = await issueLicense(app, { domain_limit: 1 });
    const file = join(dir, 'replayed-site.json');
    const run = (action: string, extra: Record<string, unknown> = {}) =>
      phpClient({ action, base_url: app.url, key: revocable.token, storage: file, public_keys: pinned, ...extra });
    expect((await run('activate', { site_url: 'https://replayed-shop.example' })).edition).toBe('licensed');
    const fingerprint = (await run('fingerprint', { site_url: 'https://replayed-shop.example' })).result as string;
    // A genuine verify answer of the service, recorded by whoever sits between the site and it.
    const recorded = await (
      await fetch(`${app.url}/api/portal/v1/licenses/${revocable.token}/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ site_fingerprint: fingerprint }),
      })
    ).json();
    expect(recorded).toMatchObject({ status: 'ok', site_match: true });
    // Ten minutes later the licence is revoked and the site hears it; then the recording plays.
    await app.admin.patch(`/api/management/v1/licenses/${revocable.id}`, { status: 'revoked' });
    const later = Math.floor(Date.now() / 1000) + 600;
    expect(await run('verify', { now: later })).toMatchObject({ result: { kind: 'refused', error: 'license_inactive' }, edition: 'unlicensed' });
    const replay = await fakeServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(recorded)));
    const out = await run('verify', { base_url: replay, now: later });
    expect(out.result).toEqual({ kind: 'no_news', reason: expect.stringContaining('out of date') });
    expect(out.edition).toBe('unlicensed');
  });
});

describe('the PHP client inside WordPress (options, transients, the HTTP API, WP-Cron)', () => {
  it('keeps its state in options, checks through wp_remote_post, and schedules one daily check', async () => {
    const wp = join(dir, 'wordpress.json');
    const wpLicense = await issueLicense(app);
    const call = (action: string, extra: Record<string, unknown> = {}) =>
      phpClient({ action, base_url: app.url, key: wpLicense.token, wordpress: wp, public_keys: pinned, ...extra });
    const activated = await call('activate', { site_url: 'https://wp-site.example' });
    expect(activated.result.reactivated).toBe(false);
    expect(activated.edition).toBe('licensed');
    // Without explicit versions, WordPress's and PHP's own are recorded.
    const [activation] = (await app.admin.get(`/api/management/v1/licenses/${wpLicense.id}/activations`)).body.data.items;
    expect(activation).toMatchObject({ wp_version: '6.6.2', php_version: expect.stringMatching(/^8\./) });

    const cron = await call('cron', { hook: 'myplugin_licence_check' });
    // Hooked on each load, scheduled once, daily, within the next day.
    expect(cron.result.myplugin_licence_check).toMatchObject({ recurrence: 'daily', scheduled: 1 });
    expect(cron.result.myplugin_licence_check.timestamp).toBeGreaterThan(Date.now() / 1000);
    expect(cron.result.myplugin_licence_check.timestamp).toBeLessThanOrEqual(Date.now() / 1000 + 86_400 + 60);

    const site = JSON.parse(await readFile(wp, 'utf8'));
    expect(Object.keys(site.options).sort()).toEqual(['svc_licence_site_secret', 'svc_licence_site_url', 'svc_licence_state']);
    for (const option of Object.values(site.options) as { autoload: boolean }[]) expect(option.autoload).toBe(false);
    expect(JSON.parse(site.options.svc_licence_state.value)).toMatchObject({ edition: 'licensed', answer: { action: 'verify' } });
    // Every request went through the WordPress HTTP API, the check under a transient lock it
    // released; the keys once if the key the answers are signed with is not a pinned one (another
    // test of this file rotates it, before or after this one), so its successor is learnt.
    const [signing] = await app.stack.services.licenseKeys.list();
    const rotated = !pinned.some((k) => k.key_id === signing!.key_id);
    expect(site.http).toEqual([
      `POST ${app.url}/api/portal/v1/licenses/${wpLicense.token}/activate`,
      ...(rotated ? [`GET ${app.url}/api/portal/v1/keys`] : []),
      `POST ${app.url}/api/portal/v1/licenses/${wpLicense.token}/verify`,
    ]);
    expect(site.transients_set).toEqual(['svc_licence_check_lock']);
    expect(Object.keys(site.transients)).toEqual([]);

    const unscheduled = await call('unschedule', { hook: 'myplugin_licence_check' });
    expect(Object.keys(unscheduled.result)).toEqual([]);
    // Offline, WordPress's HTTP API reports an error: no news.
    const offline = await phpClient({
      action: 'verify',
      base_url: `http://127.0.0.1:${await freePort()}`,
      key: wpLicense.token,
      wordpress: wp,
      public_keys: pinned,
    });
    expect(offline.result.kind).toBe('no_news');
    expect(offline.edition).toBe('licensed');
  });
});

describe('clients/php/README.md, followed as a vendor would', () => {
  it('copies the file, renames its namespace, and runs the example plugin: activate, then the premium features load', async () => {
    const readme = await readFile(fileURLToPath(new URL('../clients/php/README.md', import.meta.url)), 'utf8');
    const block = (heading: string, language: string) => {
      const section = readme.slice(readme.indexOf(heading));
      const match = new RegExp('```' + language + '\\n([\\s\\S]*?)```').exec(section);
      if (!match) throw new Error(`no ${language} block under ${heading}`);
      return match[1]!;
    };
    const vendor = await mkdtemp(join(dir, 'vendor-'));
    await mkdir(join(vendor, 'clients'));
    await symlink(fileURLToPath(new URL('../clients/php', import.meta.url)), join(vendor, 'clients', 'php'));
    // Step 1, the README's own shell commands.
    execFileSync('sh', ['-e', '-c', block('## 1.', 'sh')], { cwd: vendor });
    const copied = await readFile(join(vendor, 'my-plugin/includes/licensing/LicenseClient.php'), 'utf8');
    expect(copied).toContain('namespace MyPlugin\\Licensing;');
    expect(copied).not.toContain('Svc\\Licensing');

    // Step 3, the README's example plugin, with this service's address and key.
    const key = pinned.at(-1)!;
    const plugin = block('## 3.', 'php')
      .replace("'https://licences.example.com'", JSON.stringify(app.url).replace(/"/g, "'"))
      .replace("'9263a6de117af668'", `'${key.key_id}'`)
      .replace("'JZEPHagyhXq0u+IZ7/3PCLEKovHzh5qpfrLbbD7itQc='", `'${key.public_key}'`);
    expect(plugin).toContain(app.url);
    await writeFile(join(vendor, 'my-plugin/my-plugin.php'), plugin);
    await writeFile(join(vendor, 'my-plugin/includes/pro.php'), "<?php\n\ndefine('MY_PLUGIN_PRO', true);\n");
    const shim = fileURLToPath(new URL('./php/wordpress-shim.php', import.meta.url));
    await writeFile(
      join(vendor, 'page-load.php'),
      `<?php
$GLOBALS['svc_wordpress_file'] = $argv[1];
require ${JSON.stringify(shim)};
$GLOBALS['svc_home_url'] = 'https://readme-shop.example';
require __DIR__ . '/my-plugin/my-plugin.php';
do_action('plugins_loaded');
$out = ['pro_loaded' => defined('MY_PLUGIN_PRO')];
if (($argv[2] ?? '') === 'activate') {
    $out['message'] = my_plugin_activate_licence();
}
$out['licensed'] = my_plugin_licence()->isLicensed();
$out['cron'] = array_keys(svc_wordpress_state()['cron'] ?? []);
echo json_encode($out);
`,
    );
    const readmeLicense = await issueLicense(app);
    const site = join(vendor, 'wordpress.json');
    await writeFile(site, JSON.stringify({ options: { my_plugin_licence_key: { value: readmeLicense.token, autoload: true } } }));
    const load = async (...args: string[]) => {
      const run = await runPhp(['-f', join(vendor, 'page-load.php'), '--', site, ...args]);
      expect(run.code, run.stderr + run.stdout).toBe(0);
      return JSON.parse(run.stdout);
    };
    expect(await load()).toEqual({ pro_loaded: false, licensed: false, cron: ['my_plugin_licence_check'] });
    expect(await load('activate')).toEqual({ pro_loaded: false, message: 'Licence activated.', licensed: true, cron: ['my_plugin_licence_check'] });
    expect(await load()).toEqual({ pro_loaded: true, licensed: true, cron: ['my_plugin_licence_check'] });
    const [activation] = (await app.admin.get(`/api/management/v1/licenses/${readmeLicense.id}/activations`)).body.data.items;
    expect(activation).toMatchObject({ site_url: 'https://readme-shop.example', plugin_version: '1.4.0', status: 'active' });
  });
});
