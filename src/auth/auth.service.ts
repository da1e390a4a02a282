import { availableParallelism } from 'node:os';
import type { Config } from '../config.js';
import { type KeyRing, randomToken, safeEqual, sha256 } from '../platform/crypto.js';
import { AppError, rateLimited, unauthenticated } from '../platform/errors.js';
import type { RateLimiter } from '../platform/rate-limit.js';
import { WorkLimiter } from '../platform/work-limiter.js';
import type { UserStore } from './user.store.js';
import { capabilitiesOf, hasCapability, type Role } from './capabilities.js';
import { decoyHash, normaliseAppPassword, verifySecret } from './passwords.js';

/** The caller's identity, passed explicitly into services. */
export interface Principal {
  id: number;
  login: string;
  role: Role;
  /** How the request authenticated: an application password or a browser session. */
  via: 'app_password' | 'session';
  sessionId?: string;
  can(capability: string): boolean;
}

export const SESSION_COOKIE = 'svc_session';
const LOGIN_WINDOW_SECONDS = 15 * 60;

/**
 * Authentication of every surface: HTTP Basic with application passwords for external callers,
 * and a signed session cookie plus X-Svc-Nonce for browsers.
 */
export class AuthService {
  /**
   * Successful argon2 verifications, keyed by app password id, holding a SHA-256 of the secret.
   * argon2 is deliberately slow; without this every API call would pay it. Revocation still
   * applies at once because the row is read on every request.
   */
  private readonly verified = new Map<number, string>();
  private readonly lastUsedWrites = new Map<number, number>();
  /** Password hashing is CPU-bound by design; at most one check per core runs at a time. */
  private readonly hashing = new WorkLimiter(
    availableParallelism(),
    500,
    () => new AppError('service_unavailable', 'Too many sign-in attempts are being checked; retry shortly', undefined, { 'Retry-After': '1' }),
  );

  constructor(
    private readonly store: UserStore,
    private readonly keys: KeyRing,
    private readonly limiter: RateLimiter,
    private readonly config: Config,
    /** Milliseconds since the epoch, by which sessions and nonces expire (tests move it on instead of waiting). */
    private readonly now: () => number = Date.now,
  ) {}

  principal(user: { id: number; login: string; role: string }, via: Principal['via'], sessionId?: string): Principal {
    const role = user.role as Role;
    const map = { svc_agent_use: this.config.SVC_AGENT_CAPABILITY };
    return { id: user.id, login: user.login, role, via, ...(sessionId ? { sessionId } : {}), can: (c) => hasCapability(role, c, map) };
  }

  capabilitiesOf(role: Role): string[] {
    return capabilitiesOf(role, { svc_agent_use: this.config.SVC_AGENT_CAPABILITY });
  }

  /** The failure limits an attempt counts against: its login name from its address, and its address alone. */
  private failureBuckets(login: string, ip: string): [string, number][] {
    return [
      [`login:${login.toLowerCase()}:${ip}`, this.config.SVC_LOGIN_MAX_FAILURES],
      [`login-address:${ip}`, this.config.SVC_LOGIN_MAX_FAILURES_PER_ADDRESS],
    ];
  }

  /**
   * Checks a secret as one attempt against the failure limits. The attempt is counted before the
   * (deliberately slow) check, in the same statement that decides whether it may be made, so
   * parallel guesses cannot all pass a check made before any of them was counted; a right secret
   * is taken back from the count. Returns what `check` found, or throws 429 over the limit.
   */
  private async attempt<T>(login: string, ip: string, check: () => Promise<T | undefined>): Promise<T | undefined> {
    const buckets = this.failureBuckets(login, ip);
    const decisions = await Promise.all(buckets.map(([bucket, limit]) => this.limiter.hit(bucket, limit, LOGIN_WINDOW_SECONDS)));
    const refund = (which: boolean[]) => Promise.all(buckets.filter((_, i) => which[i]).map(([bucket]) => this.limiter.refund(bucket, LOGIN_WINDOW_SECONDS)));
    const refused = decisions.filter((d) => !d.allowed);
    if (refused.length) {
      await refund(decisions.map((d) => d.allowed));
      throw rateLimited(Math.max(...refused.map((d) => d.retryAfterSeconds)));
    }
    const found = await this.hashing.run(check);
    if (found !== undefined) await refund(buckets.map(() => true));
    return found;
  }

  /** HTTP Basic with an application password. Throws 401 (or 429 after repeated failures). */
  async authenticateBasic(login: string, password: string, ip: string): Promise<Principal> {
    const secret = normaliseAppPassword(password);
    const rows = await this.store.credentials(login);
    const digest = sha256(secret);
    for (const row of rows) {
      const cached = this.verified.get(row.ap_id);
      if (cached && safeEqual(cached, digest)) return this.accept(row);
    }
    // Only guesses reach this point (a verified password is answered from the cache above), so
    // the failure limit is checked here: no query more on an authenticated request.
    const match = await this.attempt(login, ip, async () => {
      for (const row of rows) if (await verifySecret(row.secret_hash, secret)) return row;
      // An unknown login costs the same time as a known one, so timing tells no login names.
      if (rows.length === 0) await verifySecret(await decoyHash(), secret);
      return undefined;
    });
    if (!match) throw unauthenticated('Invalid login or application password');
    this.verified.set(match.ap_id, digest);
    return this.accept(match);
  }

  private accept(row: { user_id: number; login: string; role: string; ap_id: number }): Principal {
    const now = this.now();
    // last_used_at is informative; write it at most once a minute per password.
    if ((this.lastUsedWrites.get(row.ap_id) ?? 0) < now - 60_000) {
      this.lastUsedWrites.set(row.ap_id, now);
      this.store.touchAppPassword(row.ap_id).catch(() => undefined);
    }
    return this.principal({ id: row.user_id, login: row.login, role: row.role }, 'app_password');
  }

  /** Browser login with the account password; returns the cookie value and a first nonce. */
  async login(login: string, password: string, ip: string): Promise<{ cookie: string; nonce: string; principal: Principal; expiresAt: Date }> {
    const user = await this.attempt(login, ip, async () => {
      const found = await this.store.userByLogin(login);
      const ok = await verifySecret(found?.passwordHash ?? (await decoyHash()), password);
      return found && ok ? found : undefined;
    });
    if (!user) throw unauthenticated('Invalid login or password');
    const id = randomToken(24);
    const expiresAt = new Date(this.now() + this.config.SVC_SESSION_TTL_HOURS * 3600_000);
    await this.store.insertSession(user.id, id, expiresAt);
    const expiry = Math.floor(expiresAt.getTime() / 1000);
    const cookie = `${id}.${expiry}.${this.keys.sign(`session|${id}|${expiry}`)}`;
    return { cookie, nonce: this.issueNonce(id), principal: this.principal(user, 'session', id), expiresAt };
  }

  /** A nonce is bound to one session and expires; it proves the request came from our page. */
  issueNonce(sessionId: string): string {
    const expiry = Math.floor(this.now() / 1000 + this.config.SVC_NONCE_TTL_HOURS * 3600);
    return `${expiry}.${this.keys.sign(`nonce|${sessionId}|${expiry}`)}`;
  }

  verifyNonce(sessionId: string, nonce: string | undefined): boolean {
    if (!nonce) return false;
    const [expiry, signature] = nonce.split('.');
    if (!expiry || !signature || !/^\d+$/.test(expiry) || Number(expiry) * 1000 < this.now()) return false;
    return this.keys.verify(`nonce|${sessionId}|${expiry}`, signature);
  }

  /** Resolves a session cookie; returns undefined for a forged, expired or revoked one. */
  async sessionFromCookie(cookie: string): Promise<Principal | undefined> {
    const [id, expiry, signature] = cookie.split('.');
    if (!id || !expiry || !signature || !/^\d+$/.test(expiry) || Number(expiry) * 1000 < this.now()) return undefined;
    if (!this.keys.verify(`session|${id}|${expiry}`, signature)) return undefined;
    const user = await this.store.sessionUser(id);
    return user ? this.principal(user, 'session', id) : undefined;
  }

  async logout(sessionId: string): Promise<void> {
    await this.store.revokeSession(sessionId);
  }
}
