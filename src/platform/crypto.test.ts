import { describe, expect, it } from 'vitest';
import { KeyRing, generateMasterKey, parseMasterKey } from './crypto.js';

const keys = new KeyRing(parseMasterKey(generateMasterKey()));

describe('AES-GCM of the key ring', () => {
  it('decrypts what it encrypted, with the same additional data only', () => {
    const sealed = keys.encryptBytes(Buffer.from('payload'), Buffer.from('workflow'));
    expect(keys.decryptBytes(sealed, keys.keyId, Buffer.from('workflow')).toString()).toBe('payload');
    expect(() => keys.decryptBytes(sealed, keys.keyId, Buffer.from('activity'))).toThrow();
    expect(keys.decrypt(keys.encrypt('secret'))).toBe('secret');
  });

  it('seals every payload under an IV of its own, also past the IVs drawn at once, and each opens', () => {
    const sealed = Array.from({ length: 10_000 }, (_, i) => keys.encryptBytes(Buffer.from(`payload ${i}`), Buffer.from('workflow')));
    const ivs = new Set(sealed.map((s) => s.subarray(0, 12).toString('hex')));
    expect(ivs.size).toBe(sealed.length);
    expect(ivs.has('0'.repeat(24))).toBe(false);
    sealed.forEach((s, i) => expect(keys.decryptBytes(s, keys.keyId, Buffer.from('workflow')).toString()).toBe(`payload ${i}`));
  });

  it('refuses a shortened authentication tag: a 4-byte tag could be forged in 2^32 tries', () => {
    // Sealed bytes are iv (12) | tag (16) | ciphertext; a truncated tag must not authenticate.
    const empty = keys.encryptBytes(new Uint8Array(0));
    expect(() => keys.decryptBytes(empty.subarray(0, 16), keys.keyId)).toThrow();
    const [keyId, iv, tag, body] = keys.encrypt('secret').split(':');
    const short = Buffer.from(tag!, 'base64url').subarray(0, 4).toString('base64url');
    expect(() => keys.decrypt([keyId, iv, short, body].join(':'))).toThrow();
  });
});
