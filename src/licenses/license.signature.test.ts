import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { canonicalAnswer, canonicalKey, keyIdOf, percentEncode, signText, trustedKeys, verifyText, type AnswerToSign } from './license.signature.js';

// The test vector of docs/licences.md: an Ed25519 key from a fixed seed, so anyone can check an
// implementation of the canonical form against these exact bytes and signatures.
const seed = createHash('sha256').update('svc licence test vector').digest();
const privateKey = createPrivateKey({ key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]), format: 'der', type: 'pkcs8' });
const publicKey = Buffer.from(createPublicKey(privateKey).export({ format: 'jwk' }).x!, 'base64url');
const head = { alg: 'ed25519' as const, key_id: '9263a6de117af668', issued_at: '2026-11-22T10:00:00Z', valid_until: '2026-12-22T10:00:00Z' };
const verifyAnswer: AnswerToSign = {
  action: 'verify',
  licenseKey: 'lic_abcdefghijklmnopqrst',
  siteFingerprint: '3f1c' + '0'.repeat(60),
  license: {
    license_status: 'active',
    expires_at: '2027-01-31 23:59:59',
    domain_limit: 3,
    site_match: true,
    product_slug: 'seo-suite',
    product_name: 'SEO Suite Pro — Ünïcode & more',
  },
};

describe('canonical form of a signed answer (docs/licences.md)', () => {
  it('matches the documented test vector byte for byte', () => {
    expect(seed.toString('hex')).toBe('332b8dfe4a539a9442c77314cdd51a71375c9ce244a0207938fdd0c543d5b376');
    expect(publicKey.toString('base64')).toBe('JZEPHagyhXq0u+IZ7/3PCLEKovHzh5qpfrLbbD7itQc=');
    expect(keyIdOf(publicKey)).toBe(head.key_id);
    const text = canonicalAnswer(verifyAnswer, head);
    expect(text).toBe(
      [
        'svc-licence-answer/v1',
        'alg=ed25519',
        'key_id=9263a6de117af668',
        'issued_at=2026-11-22T10%3A00%3A00Z',
        'valid_until=2026-12-22T10%3A00%3A00Z',
        'action=verify',
        'license_key=lic_abcdefghijklmnopqrst',
        'site_fingerprint=3f1c000000000000000000000000000000000000000000000000000000000000',
        'license_status=active',
        'expires_at=2027-01-31%2023%3A59%3A59',
        'domain_limit=3',
        'site_match=true',
        'product_slug=seo-suite',
        'product_name=SEO%20Suite%20Pro%20%E2%80%94%20%C3%9Cn%C3%AFcode%20%26%20more',
      ].join('\n'),
    );
    // Ed25519 is deterministic: the same key and text always give this signature.
    expect(signText(text, privateKey)).toBe('T8rS3Oc2EvLEUcqFq/zadPDEwoOMhkpuysZxqAAm0v1RLEWj4mJPn6czTUD7PNfn1Ure/RbCGum1jXSdKASrDA==');
    const activate = canonicalAnswer(
      { ...verifyAnswer, action: 'activate', activation: { activation_id: 'act_abcdefghijklmnopqrst', reactivated: false } },
      head,
    );
    expect(activate).toBe(`${text.replace('action=verify', 'action=activate')}\nactivation_id=act_abcdefghijklmnopqrst\nreactivated=false`);
    expect(signText(activate, privateKey)).toBe('EWhXkfcsslKTNufQ3wQIpoYb7l8hxNil2gURvM1eZoJC46UanlBZE0kThF3YXeStOxBQyI134xYZjfricFi9Bw==');
  });

  it('writes an absent fingerprint and a licence without expiry as empty values', () => {
    const text = canonicalAnswer(
      { ...verifyAnswer, siteFingerprint: undefined, license: { ...verifyAnswer.license, expires_at: null, site_match: false } },
      head,
    );
    expect(text).toContain('\nsite_fingerprint=\n');
    expect(text).toContain('\nexpires_at=\n');
    expect(text).toContain('\nsite_match=false\n');
  });

  it('percent-encodes every byte but the RFC 3986 unreserved ones, as PHP rawurlencode does', () => {
    expect(percentEncode("AZaz09-._~ !'()*/%+=&\n")).toBe('AZaz09-._~%20%21%27%28%29%2A%2F%25%2B%3D%26%0A');
    expect(percentEncode('é')).toBe('%C3%A9');
    // A value cannot smuggle in another line: the newline is encoded.
    expect(canonicalAnswer({ ...verifyAnswer, licenseKey: 'k\nsite_match=true' }, head)).toContain('license_key=k%0Asite_match%3Dtrue\n');
  });

  it('does not verify once any signed field changes', () => {
    const value = signText(canonicalAnswer(verifyAnswer, head), privateKey);
    const pub = publicKey.toString('base64');
    expect(verifyText(canonicalAnswer(verifyAnswer, head), value, pub)).toBe(true);
    for (const changed of [
      { ...verifyAnswer, licenseKey: 'another-key' },
      { ...verifyAnswer, siteFingerprint: 'f'.repeat(64) },
      { ...verifyAnswer, license: { ...verifyAnswer.license, domain_limit: 30 } },
      { ...verifyAnswer, license: { ...verifyAnswer.license, expires_at: '2099-01-31 23:59:59' } },
      { ...verifyAnswer, action: 'activate' as const },
    ]) {
      expect(verifyText(canonicalAnswer(changed, head), value, pub)).toBe(false);
    }
    expect(verifyText(canonicalAnswer(verifyAnswer, { ...head, valid_until: '2036-12-22T10:00:00Z' }), value, pub)).toBe(false);
    expect(verifyText(canonicalAnswer(verifyAnswer, head), 'AAAA', pub)).toBe(false);
    expect(verifyText(canonicalAnswer(verifyAnswer, head), value, 'not a key')).toBe(false);
  });
});

describe('key endorsements', () => {
  const makeKey = (createdAt: string) => {
    const pair = generateKeyPairSync('ed25519');
    const raw = Buffer.from(pair.publicKey.export({ format: 'jwk' }).x!, 'base64url');
    return { privateKey: pair.privateKey, entry: { key_id: keyIdOf(raw), public_key: raw.toString('base64'), created_at: createdAt } };
  };

  it('trusts the successors of a trusted key along the chain, and nothing else', () => {
    const k1 = makeKey('2026-01-01T00:00:00Z');
    const k2 = makeKey('2026-02-01T00:00:00Z');
    const k3 = makeKey('2026-03-01T00:00:00Z');
    const stranger = makeKey('2026-03-02T00:00:00Z');
    const listed = [
      { ...k3.entry, endorsement: { key_id: k2.entry.key_id, value: signText(canonicalKey(k3.entry), k2.privateKey) } },
      { ...k2.entry, endorsement: { key_id: k1.entry.key_id, value: signText(canonicalKey(k2.entry), k1.privateKey) } },
      // Claims an endorsement by k1 that k1 never made.
      { ...stranger.entry, endorsement: { key_id: k1.entry.key_id, value: signText(canonicalKey(stranger.entry), stranger.privateKey) } },
    ];
    const ids = (keys: { key_id: string }[]) => keys.map((k) => k.key_id).sort();
    expect(ids(trustedKeys([k1.entry], listed))).toEqual(ids([k1.entry, k2.entry, k3.entry]));
    expect(ids(trustedKeys([k2.entry], listed))).toEqual(ids([k2.entry, k3.entry]));
    expect(ids(trustedKeys([stranger.entry], listed))).toEqual([stranger.entry.key_id]);
    // An endorsement covers the key's creation time as well as its bytes.
    const moved = [{ ...listed[1]!, created_at: '2030-01-01T00:00:00Z' }];
    expect(ids(trustedKeys([k1.entry], moved))).toEqual([k1.entry.key_id]);
  });
});
