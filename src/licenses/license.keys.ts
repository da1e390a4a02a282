import { createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import type { Sql } from '../db/sql.js';
import { toDate, toIso } from '../db/sql.js';
import type { KeyRing } from '../platform/crypto.js';
import {
  canonicalAnswer,
  canonicalKey,
  isoSeconds,
  keyIdOf,
  signText,
  type AnswerSignature,
  type AnswerToSign,
  type PublicKeyEntry,
} from './license.signature.js';

/** How long a process keeps using the signing key it loaded before it looks for a rotation. */
const KEY_CACHE_MS = 30_000;
/**
 * A retired key stays listed this much longer than the signature lifetime: another process may
 * still sign with it until its cache expires.
 */
const RETIRED_SLACK_SECONDS = 2 * (KEY_CACHE_MS / 1000);

interface KeyRow {
  key_id: string;
  public_key: string;
  private_key_sealed: string | null;
  endorsed_by: string | null;
  endorsement: string | null;
  created_at: Date | string;
  retired_at: Date | string | null;
  valid_until: Date | string | null;
}

interface SigningKey {
  keyId: string;
  privateKey: KeyObject;
}

const columns = 'key_id, public_key, private_key_sealed, endorsed_by, endorsement, created_at, retired_at, valid_until';

function entryOf(row: KeyRow): PublicKeyEntry {
  return {
    key_id: row.key_id,
    alg: 'ed25519',
    public_key: row.public_key,
    status: row.retired_at === null ? 'current' : 'retired',
    created_at: isoSeconds(toDate(row.created_at)),
    retired_at: row.retired_at === null ? null : toIso(row.retired_at),
    valid_until: row.valid_until === null ? null : toIso(row.valid_until),
    endorsement: row.endorsed_by && row.endorsement ? { key_id: row.endorsed_by, value: row.endorsement } : null,
  };
}

/**
 * The Ed25519 keys that sign licence answers: stored in PostgreSQL with the private key sealed
 * under the service key, created on first use, rotated by `svc license rotate-key`.
 */
export class LicenseKeyService {
  private cached: Promise<SigningKey> | undefined;
  private cachedAt = 0;

  constructor(
    private readonly sql: Sql,
    private readonly keys: KeyRing,
    /** Lifetime of an answer signature. */
    private readonly signatureTtlSeconds: number,
  ) {}

  /** Signs an activate or verify answer with the current key. */
  async signAnswer(answer: AnswerToSign, now = new Date()): Promise<AnswerSignature> {
    const key = await this.signingKey();
    const issued = new Date(Math.floor(now.getTime() / 1000) * 1000);
    const head = {
      alg: 'ed25519' as const,
      key_id: key.keyId,
      issued_at: isoSeconds(issued),
      valid_until: isoSeconds(new Date(issued.getTime() + this.signatureTtlSeconds * 1000)),
    };
    return { ...head, value: signText(canonicalAnswer(answer, head), key.privateKey) };
  }

  /** The current key, then every retired key still within its validity, most recently retired first. */
  async list(): Promise<PublicKeyEntry[]> {
    await this.signingKey();
    const rows = await this.sql.query<KeyRow>(
      // The current key first, then retired ones, most recently retired first (created_at has
      // whole seconds only, so it cannot order two keys made in the same second).
      `select ${columns} from license_signing_keys where valid_until is null or valid_until > now()
        order by retired_at desc nulls first, created_at desc, key_id`,
    );
    return rows.map(entryOf);
  }

  /**
   * Retires the current key and makes a new one, endorsed by the one it replaces. The retired
   * key's private half is dropped; its public half stays listed until every answer it signed has
   * expired.
   */
  async rotate(): Promise<{ retired: string | null; current: PublicKeyEntry }> {
    const result = await this.sql.transaction(async (tx) => {
      const [old] = await tx.query<KeyRow>(`select ${columns} from license_signing_keys where retired_at is null for update`);
      const fresh = this.generate();
      let endorsement: string | null = null;
      if (old) {
        endorsement = signText(
          canonicalKey({ key_id: fresh.keyId, public_key: fresh.publicKey, created_at: fresh.createdAt }),
          this.unseal(old.private_key_sealed!),
        );
        await tx.query(
          `update license_signing_keys set retired_at = now(), valid_until = now() + make_interval(secs => ?), private_key_sealed = null where key_id = ?`,
          [this.signatureTtlSeconds + RETIRED_SLACK_SECONDS, old.key_id],
        );
      }
      const [row] = await tx.query<KeyRow>(
        `insert into license_signing_keys (key_id, public_key, private_key_sealed, endorsed_by, endorsement, created_at)
         values (?, ?, ?, ?, ?, ?) returning ${columns}`,
        [fresh.keyId, fresh.publicKey, fresh.sealed, old?.key_id ?? null, endorsement, fresh.createdAt],
      );
      return { retired: old?.key_id ?? null, current: entryOf(row!) };
    });
    this.cached = undefined;
    return result;
  }

  private generate() {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url');
    return {
      keyId: keyIdOf(raw),
      publicKey: raw.toString('base64'),
      sealed: this.keys.encrypt(privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64')),
      // Whole seconds: the created_at an endorsement covers must read back the same.
      createdAt: isoSeconds(new Date()),
    };
  }

  private unseal(sealed: string): KeyObject {
    let der: string;
    try {
      der = this.keys.decrypt(sealed);
    } catch (err) {
      throw new Error(
        `The licence signing key cannot be decrypted (${(err as Error).message}): every process must share SVC_ENCRYPTION_KEY, and an earlier key belongs in SVC_PREVIOUS_ENCRYPTION_KEYS`,
      );
    }
    return createPrivateKey({ key: Buffer.from(der, 'base64'), format: 'der', type: 'pkcs8' });
  }

  /** The current key, from a short cache; the first use ever creates it. */
  private signingKey(): Promise<SigningKey> {
    if (!this.cached || Date.now() - this.cachedAt >= KEY_CACHE_MS) {
      this.cachedAt = Date.now();
      const next = this.load();
      this.cached = next;
      next.catch(() => {
        if (this.cached === next) this.cached = undefined;
      });
    }
    return this.cached;
  }

  private async load(): Promise<SigningKey> {
    const current = () => this.sql.query<KeyRow>(`select ${columns} from license_signing_keys where retired_at is null`);
    let [row] = await current();
    if (!row) {
      const fresh = this.generate();
      // Two processes may get here at once; the unique index lets one key win.
      await this.sql.query(`insert into license_signing_keys (key_id, public_key, private_key_sealed, created_at) values (?, ?, ?, ?) on conflict do nothing`, [
        fresh.keyId,
        fresh.publicKey,
        fresh.sealed,
        fresh.createdAt,
      ]);
      [row] = await current();
    }
    return { keyId: row!.key_id, privateKey: this.unseal(row!.private_key_sealed!) };
  }
}
