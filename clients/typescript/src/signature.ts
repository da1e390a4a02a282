/**
 * The signature the service puts on activate and verify answers, and the endorsement a retiring
 * signing key puts on its successor: their canonical forms (the service's docs/licences.md
 * documents them byte for byte, so a client in any language can check them) and Ed25519
 * verification over them. Pure apart from Node's crypto. The service builds the texts it signs
 * with these same functions, so the client and the server cannot disagree on a byte.
 */
import { createHash, createPublicKey, verify as edVerify, type KeyObject } from 'node:crypto';

export const ANSWER_FORMAT = 'svc-licence-answer/v1';
export const KEY_FORMAT = 'svc-licence-key/v1';

export interface AnswerSignature {
  alg: 'ed25519';
  /** The signing key: the first 16 hex digits of the SHA-256 of its raw 32-byte public key. */
  key_id: string;
  /** ISO 8601 UTC to the second (`2026-11-22T10:00:00Z`). */
  issued_at: string;
  /** When the signature stops vouching for the answer, same format. */
  valid_until: string;
  /** Base64 (standard alphabet, padded) of the 64-byte Ed25519 signature. */
  value: string;
}

/** The licence as activate and verify describe it (the fields of a verify answer besides `status` and `signature`). */
export interface SignedLicense {
  license_status: 'active';
  /** `YYYY-MM-DD HH:MM:SS` (UTC), or null for a licence without expiry. */
  expires_at: string | null;
  domain_limit: number;
  site_match: boolean;
  product_slug: string;
  product_name: string;
}

export interface AnswerToSign {
  action: 'activate' | 'verify';
  /** The licence key exactly as the request's path carried it (token or reference id). */
  licenseKey: string;
  /** The site_fingerprint the request sent; absent means an empty value. */
  siteFingerprint?: string | undefined;
  license: SignedLicense;
  /** Activate answers only. */
  activation?: { activation_id: string; reactivated: boolean };
}

/** A public key as `GET /api/portal/v1/keys` lists it. */
export interface PublicKeyEntry {
  key_id: string;
  alg: 'ed25519';
  /** Base64 of the raw 32-byte public key. */
  public_key: string;
  status: 'current' | 'retired';
  created_at: string;
  retired_at: string | null;
  /** Null for the current key; a retired key is listed until then. */
  valid_until: string | null;
  /** The predecessor's signature over this key's canonical form; null for the first key. */
  endorsement: { key_id: string; value: string } | null;
}

const unreserved = /^[A-Za-z0-9\-._~]$/;

/**
 * Percent-encodes the UTF-8 bytes of `value`: every byte except A-Z a-z 0-9 - . _ ~ becomes `%`
 * and two upper-case hex digits (RFC 3986; PHP's rawurlencode does exactly this).
 */
export function percentEncode(value: string): string {
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    const char = String.fromCharCode(byte);
    out += byte < 128 && unreserved.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

const lines = (head: string, fields: [string, string | number | boolean | null | undefined][]) =>
  [head, ...fields.map(([name, value]) => `${name}=${percentEncode(value === null || value === undefined ? '' : String(value))}`)].join('\n');

/** The exact text an answer signature covers (UTF-8, lines joined by LF, no final LF). */
export function canonicalAnswer(answer: AnswerToSign, signature: Omit<AnswerSignature, 'value'>): string {
  const { license } = answer;
  return lines(ANSWER_FORMAT, [
    ['alg', signature.alg],
    ['key_id', signature.key_id],
    ['issued_at', signature.issued_at],
    ['valid_until', signature.valid_until],
    ['action', answer.action],
    ['license_key', answer.licenseKey],
    ['site_fingerprint', answer.siteFingerprint],
    ['license_status', license.license_status],
    ['expires_at', license.expires_at],
    ['domain_limit', license.domain_limit],
    ['site_match', license.site_match],
    ['product_slug', license.product_slug],
    ['product_name', license.product_name],
    ...(answer.action === 'activate'
      ? ([
          ['activation_id', answer.activation?.activation_id],
          ['reactivated', answer.activation?.reactivated ?? false],
        ] as [string, string | boolean | undefined][])
      : []),
  ]);
}

/** The text a predecessor signs to endorse a new key. */
export function canonicalKey(key: { key_id: string; public_key: string; created_at: string }): string {
  return lines(KEY_FORMAT, [
    ['key_id', key.key_id],
    ['public_key', key.public_key],
    ['created_at', key.created_at],
  ]);
}

/** The id of a key: the first 16 hex digits of the SHA-256 of its raw 32-byte public key. */
export const keyIdOf = (rawPublicKey: Buffer) => createHash('sha256').update(rawPublicKey).digest('hex').slice(0, 16);

// DER prefix of an Ed25519 SubjectPublicKeyInfo; the raw 32-byte key follows it.
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** A KeyObject from the base64 raw form; undefined when it is not a 32-byte key. */
export function publicKeyFrom(base64: string): KeyObject | undefined {
  const raw = Buffer.from(base64, 'base64');
  if (raw.length !== 32) return undefined;
  try {
    return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
  } catch {
    return undefined;
  }
}

/** Whether `signatureBase64` is an Ed25519 signature of `text` (UTF-8) by the key in `publicKeyBase64` (raw, base64). */
export function verifyText(text: string, signatureBase64: string, publicKeyBase64: string): boolean {
  const key = publicKeyFrom(publicKeyBase64);
  const signature = Buffer.from(signatureBase64, 'base64');
  if (!key || signature.length !== 64) return false;
  try {
    return edVerify(null, Buffer.from(text, 'utf8'), key, signature);
  } catch {
    return false;
  }
}

/** A key a client trusts: pinned by the vendor, or endorsed by a trusted key. */
export interface TrustedKey {
  key_id: string;
  public_key: string;
}

/**
 * The keys `roots` vouch for: the roots themselves, and every listed key whose endorsement was
 * made by a key already trusted (followed along the chain of rotations). A listed key whose id
 * does not match its public key, or whose endorsement does not verify, is ignored.
 */
export function trustedKeys(roots: TrustedKey[], listed: Pick<PublicKeyEntry, 'key_id' | 'public_key' | 'created_at' | 'endorsement'>[]): TrustedKey[] {
  const trusted = new Map(roots.map((k) => [k.key_id, k]));
  for (let grew = true; grew;) {
    grew = false;
    for (const key of listed) {
      if (trusted.has(key.key_id) || !key.endorsement) continue;
      const endorser = trusted.get(key.endorsement.key_id);
      if (!endorser || keyIdOf(Buffer.from(key.public_key, 'base64')) !== key.key_id) continue;
      if (!verifyText(canonicalKey(key), key.endorsement.value, endorser.public_key)) continue;
      trusted.set(key.key_id, { key_id: key.key_id, public_key: key.public_key });
      grew = true;
    }
  }
  return [...trusted.values()];
}
