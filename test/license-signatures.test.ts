import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalAnswer, canonicalKey, keyIdOf, verifyText, type AnswerSignature, type PublicKeyEntry } from '../src/licenses/license.signature.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { runCli } from './helpers/cli.js';
import { issueLicense, portal, site } from './helpers/licenses.js';

let app: TestApp;

beforeAll(async () => {
  app = await startTestApp({ env: { SVC_LICENSE_RATE_LIMIT: '100000', SVC_LICENSE_SIGNATURE_TTL_DAYS: '10' } });
});
afterAll(async () => app?.close());

// The CLI reads the same configuration as the service (the signature lifetime decides how long a retired key stays listed).
const cliEnv = () => ({
  DATABASE_URL: app.databaseUrl,
  SVC_ENCRYPTION_KEY: app.config.SVC_ENCRYPTION_KEY!,
  SVC_LICENSE_SIGNATURE_TTL_DAYS: '10',
  LOG_LEVEL: 'warn',
});

async function listedKeys(): Promise<PublicKeyEntry[]> {
  const res = await app.anonymous.get('/api/portal/v1/keys');
  expect(res.status).toBe(200);
  return res.body.data.items;
}

/** Checks an answer's signature as a client in any language would: rebuild the text, verify with the listed key. */
function signatureHolds(
  keys: PublicKeyEntry[],
  request: { action: 'activate' | 'verify'; key: string; fingerprint?: string },
  license: Record<string, unknown>,
  signature: AnswerSignature,
  activation?: { activation_id: string; reactivated: boolean },
): boolean {
  const key = keys.find((k) => k.key_id === signature.key_id);
  if (!key) return false;
  const { value, ...head } = signature;
  const text = canonicalAnswer(
    {
      action: request.action,
      licenseKey: request.key,
      siteFingerprint: request.fingerprint,
      license: {
        license_status: 'active',
        expires_at: license.expires_at as string | null,
        domain_limit: license.domain_limit as number,
        site_match: license.site_match as boolean,
        product_slug: license.product_slug as string,
        product_name: license.product_name as string,
      },
      ...(activation ? { activation } : {}),
    },
    head,
  );
  return verifyText(text, value, key.public_key);
}

describe('signed licence answers', () => {
  it('signs verify answers over the answer, the key and the fingerprint, with the time of issue', async () => {
    const license = await issueLicense(app, { domain_limit: 2, expires_at: '2031-05-06T09:08:07Z', product_name: 'Signé — “quoted” & more' });
    const s = site('https://signed.example');
    // The current key is listed first, and is the only current one (the rotation tests of this
    // file may have run before, leaving retired keys listed after it).
    const keys = await listedKeys();
    const [current] = keys;
    expect(current).toMatchObject({ alg: 'ed25519', status: 'current', retired_at: null, valid_until: null });
    expect(keys.filter((k) => k.status === 'current')).toEqual([current]);
    expect(keyIdOf(Buffer.from(current!.public_key, 'base64'))).toBe(current!.key_id);

    const before = Date.now();
    const res = await portal(app.anonymous, license.token, 'verify', { site_fingerprint: s.site_fingerprint });
    expect(res.status).toBe(200);
    const { signature, status: _ok, ...answer } = res.body;
    expect(signature.key_id).toBe(current!.key_id);
    const issued = Date.parse(signature.issued_at);
    expect(issued).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
    expect(issued).toBeLessThanOrEqual(Date.now());
    expect(Date.parse(signature.valid_until) - issued).toBe(10 * 86_400_000);
    expect(signatureHolds(keys, { action: 'verify', key: license.token, fingerprint: s.site_fingerprint }, answer, signature)).toBe(true);
    // The same answer does not hold for another key form, another site, or no site.
    expect(signatureHolds(keys, { action: 'verify', key: license.reference_id, fingerprint: s.site_fingerprint }, answer, signature)).toBe(false);
    expect(signatureHolds(keys, { action: 'verify', key: license.token, fingerprint: site('https://other.example').site_fingerprint }, answer, signature)).toBe(
      false,
    );
    expect(signatureHolds(keys, { action: 'verify', key: license.token }, answer, signature)).toBe(false);
    expect(signatureHolds(keys, { action: 'verify', key: license.token, fingerprint: s.site_fingerprint }, { ...answer, domain_limit: 99 }, signature)).toBe(
      false,
    );

    // Without a fingerprint, the fingerprint is signed as empty.
    const bare = await portal(app.anonymous, license.reference_id, 'verify');
    const { signature: bareSignature, status: _bare, ...bareAnswer } = bare.body;
    expect(signatureHolds(keys, { action: 'verify', key: license.reference_id }, bareAnswer, bareSignature)).toBe(true);
  });

  it('signs activate answers, which describe the licence as verify does', async () => {
    const license = await issueLicense(app, { domain_limit: 1 });
    const s = site('https://activate-signed.example');
    const keys = await listedKeys();
    const first = await portal(app.anonymous, license.token, 'activate', s);
    expect(first.status).toBe(200);
    const { license: described, signature, activation_id } = first.body.data;
    expect(described).toEqual({
      license_status: 'active',
      expires_at: null,
      domain_limit: 1,
      site_match: true,
      product_slug: 'seo-suite',
      product_name: 'SEO Suite Pro',
    });
    const request = { action: 'activate' as const, key: license.token, fingerprint: s.site_fingerprint };
    expect(signatureHolds(keys, request, described, signature, { activation_id, reactivated: false })).toBe(true);
    expect(signatureHolds(keys, request, described, signature, { activation_id, reactivated: true })).toBe(false);
    const again = await portal(app.anonymous, license.token, 'activate', s);
    expect(again.body.data.reactivated).toBe(true);
    expect(signatureHolds(keys, request, again.body.data.license, again.body.data.signature, { activation_id, reactivated: true })).toBe(true);
    // A verify answer's signature is not an activate answer's.
    expect(signatureHolds(keys, { ...request, action: 'verify' }, described, signature)).toBe(false);
  });

  it('leaves refusals unsigned, in the documented error envelope', async () => {
    const res = await portal(app.anonymous, 'no-such-licence-key', 'verify');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ status: 'fail', error: 'license_not_found', message: expect.any(String) });
  });
});

describe('signing keys: CLI, rotation, endorsement', () => {
  it('svc license keys --json prints exactly one JSON object with the served keys', async () => {
    const served = await listedKeys();
    const out = await runCli(['license', 'keys', '--json'], cliEnv());
    expect(out.code, out.stderr).toBe(0);
    const lines = out.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toEqual({ keys: served });
    const human = await runCli(['license', 'keys'], cliEnv());
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(`public key: ${served[0]!.public_key}`);
  });

  it('rotates: the new key is endorsed by the old, which stays listed (and its signatures valid) until they expire', async () => {
    const license = await issueLicense(app);
    const s = site('https://rotation.example');
    const [old] = await listedKeys();
    const signedBefore = await portal(app.anonymous, license.token, 'verify', { site_fingerprint: s.site_fingerprint });
    expect(signedBefore.body.signature.key_id).toBe(old!.key_id);

    const out = await runCli(['license', 'rotate-key', '--json'], cliEnv());
    expect(out.code, out.stderr).toBe(0);
    const rotated = JSON.parse(out.stdout);
    expect(rotated.retired).toBe(old!.key_id);
    expect(rotated.current).toMatchObject({ status: 'current', endorsement: { key_id: old!.key_id } });

    const keys = await listedKeys();
    expect(keys.map((k) => [k.key_id, k.status])).toEqual([
      [rotated.current.key_id, 'current'],
      [old!.key_id, 'retired'],
    ]);
    const retired = keys[1]!;
    // Listed for the signature lifetime (10 days here) plus a minute of cache slack.
    expect(Date.parse(retired.valid_until!) - Date.parse(retired.retired_at!)).toBe(10 * 86_400_000 + 60_000);
    const current = keys[0]!;
    expect(verifyText(canonicalKey(current), current.endorsement!.value, old!.public_key)).toBe(true);
    // The retired key can no longer sign: its private half is gone.
    const [stored] = await app.sql<{ private_key_sealed: string | null }>('select private_key_sealed from license_signing_keys where key_id = $1', [
      old!.key_id,
    ]);
    expect(stored!.private_key_sealed).toBeNull();

    // An answer signed before the rotation still verifies against the listed keys.
    const { signature, status: _ok, ...answer } = signedBefore.body;
    expect(signatureHolds(keys, { action: 'verify', key: license.token, fingerprint: s.site_fingerprint }, answer, signature)).toBe(true);

    // Processes notice a rotation made elsewhere within their key cache (30 s); this one is told at once.
    await app.stack.services.licenseKeys.rotate();
    const newest = await listedKeys();
    expect(newest).toHaveLength(3);
    // The current key is listed first even when two keys were made within the same second.
    expect(newest.map((k) => k.status)).toEqual(['current', 'retired', 'retired']);
    expect(newest[1]!.key_id).toBe(rotated.current.key_id);
    const after = await portal(app.anonymous, license.token, 'verify', { site_fingerprint: s.site_fingerprint });
    expect(after.body.signature.key_id).toBe(newest[0]!.key_id);
    const { signature: afterSignature, status: _ok2, ...afterAnswer } = after.body;
    expect(signatureHolds(newest, { action: 'verify', key: license.token, fingerprint: s.site_fingerprint }, afterAnswer, afterSignature)).toBe(true);

    // Once its validity has passed, a retired key is no longer listed.
    await app.sql(`update license_signing_keys set valid_until = now() - interval '1 second' where key_id = $1`, [old!.key_id]);
    expect((await listedKeys()).map((k) => k.key_id)).not.toContain(old!.key_id);
  });
});
