import { hash, verify } from '@node-rs/argon2';
import { randomToken } from '../platform/crypto.js';

// Algorithm 2 is Argon2id (a const enum, which isolatedModules cannot import by name).
const options = { algorithm: 2, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const;

/** argon2id hash of a password or application password. */
export const hashSecret = (secret: string) => hash(secret, options);

export async function verifySecret(hashed: string, secret: string): Promise<boolean> {
  try {
    return await verify(hashed, secret);
  } catch {
    return false;
  }
}

/** A hash of a random value, verified against when a login names no user, so timing says nothing. */
let decoy: Promise<string> | undefined;
export const decoyHash = () => (decoy ??= hashSecret(randomToken()));

/** Application password in WordPress's shape: six groups of four characters. */
export function generateAppPassword(): string {
  const alphabet = 'abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789';
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  const chars = Array.from(bytes, (b) => alphabet[b % alphabet.length]).join('');
  return chars.match(/.{4}/g)!.join(' ');
}

/** Spaces are decoration, as in WordPress: `abcd efgh` and `abcdefgh` are the same password. */
export const normaliseAppPassword = (value: string) => value.replace(/\s+/g, '');
