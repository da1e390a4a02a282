import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes, randomFillSync, timingSafeEqual } from 'node:crypto';

/** Parses a 32-byte master key written as base64 (44 chars) or hex (64 chars). */
export function parseMasterKey(text: string): Buffer {
  const trimmed = text.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(trimmed) ? Buffer.from(trimmed, 'hex') : Buffer.from(trimmed, 'base64');
  if (key.length !== 32) throw new Error('must be 32 bytes, written as base64 or hex');
  return key;
}

export const generateMasterKey = () => randomBytes(32).toString('base64');

/**
 * GCM's whole 16-byte tag, and only that, authenticates a ciphertext: without a fixed length a
 * decipher accepts a tag cut to 4 bytes, which a forger finds in about 2^32 tries.
 */
const TAG_BYTES = 16;

/**
 * Random 96-bit IVs for AES-GCM, cut from a buffer the system's CSPRNG fills 4,096 IVs at a time:
 * asking it for 12 bytes per payload cost about as much as encrypting a small payload. Each IV is
 * 12 bytes of the generator's output of its own, used once, as with a call per IV. What `next`
 * answers is a view of the buffer, valid until the next call: it is read at once (the cipher and
 * the sealed bytes copy it).
 */
class RandomIvs {
  private readonly pool = Buffer.alloc(12 * 4096);
  private at = this.pool.length;

  next(): Buffer {
    if (this.at === this.pool.length) {
      randomFillSync(this.pool);
      this.at = 0;
    }
    this.at += 12;
    return this.pool.subarray(this.at - 12, this.at);
  }
}
const ivs = new RandomIvs();

/**
 * Keys derived from the one master key, each for a single purpose, so a leak of one use (say a
 * cookie signature) says nothing about another (credential encryption).
 */
export class KeyRing {
  /** Short identifier of the master key, stored beside ciphertexts so keys can be rotated. */
  readonly keyId: string;
  private readonly encryption: Buffer;
  private readonly signing: Buffer;

  constructor(
    master: Buffer,
    private readonly previous: KeyRing[] = [],
  ) {
    this.keyId = createHash('sha256').update(master).digest('hex').slice(0, 8);
    this.encryption = Buffer.from(hkdfSync('sha256', master, '', 'svc/encryption/v1', 32));
    this.signing = Buffer.from(hkdfSync('sha256', master, '', 'svc/signing/v1', 32));
  }

  /** AES-256-GCM with a random 96-bit IV; output `keyId:iv:tag:ciphertext`, all base64url. */
  encrypt(plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.encryption, iv);
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return [this.keyId, iv, cipher.getAuthTag(), body].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join(':');
  }

  decrypt(sealed: string): string {
    const [keyId, iv, tag, body] = sealed.split(':');
    if (!keyId || !iv || !tag || body === undefined) throw new Error('malformed ciphertext');
    const ring = keyId === this.keyId ? this : this.previous.find((r) => r.keyId === keyId);
    if (!ring) throw new Error(`no key with id ${keyId}`);
    const decipher = createDecipheriv('aes-256-gcm', ring.encryption, Buffer.from(iv, 'base64url'), { authTagLength: TAG_BYTES });
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
  }

  /**
   * AES-256-GCM over bytes (Temporal payloads): `iv | tag | ciphertext`. `aad`, when given, is
   * authenticated with them: the bytes decrypt only with the same `aad` (what they were sealed for).
   */
  encryptBytes(plain: Uint8Array, aad?: Uint8Array): Buffer {
    const iv = ivs.next();
    const cipher = createCipheriv('aes-256-gcm', this.encryption, iv);
    if (aad) cipher.setAAD(aad);
    const body = cipher.update(plain);
    const last = cipher.final();
    return Buffer.concat([iv, cipher.getAuthTag(), body, last]);
  }

  decryptBytes(sealed: Uint8Array, keyId: string, aad?: Uint8Array): Buffer {
    const ring = keyId === this.keyId ? this : this.previous.find((r) => r.keyId === keyId);
    if (!ring) throw new Error(`no key with id ${keyId}`);
    const data = Buffer.from(sealed);
    const decipher = createDecipheriv('aes-256-gcm', ring.encryption, data.subarray(0, 12), { authTagLength: TAG_BYTES });
    if (aad) decipher.setAAD(aad);
    decipher.setAuthTag(data.subarray(12, 28));
    return Buffer.concat([decipher.update(data.subarray(28)), decipher.final()]);
  }

  sign(value: string): string {
    return createHmac('sha256', this.signing).update(value).digest('base64url');
  }

  verify(value: string, signature: string): boolean {
    return safeEqual(this.sign(value), signature);
  }
}

/** Constant-time string comparison that does not leak the length through an early return. */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

export const sha256 = (value: string) => createHash('sha256').update(value).digest('hex');

/** URL-safe random token of `bytes` bytes of entropy. */
export const randomToken = (bytes = 24) => randomBytes(bytes).toString('base64url');
