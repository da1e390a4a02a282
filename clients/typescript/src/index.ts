/**
 * A small typed client of the public licence endpoints, for a plugin's own Node tooling (build
 * scripts, test harnesses, a site's sync job). It imports only its own signature module
 * (canonical forms and Ed25519 through Node's crypto), nothing of the service.
 *
 * A network error on verify is no news, and only a definitive answer (a signed 200, or a 403 or
 * 404 refusal) changes the site's edition. So `verify()` never throws: it answers `valid`, `refused` or `no_news`, and the
 * cached edition moves only on the first two. A 200 answer counts only when it carries a
 * signature by a trusted key over this licence key and site fingerprint (README.md); a
 * forged or altered one is no news. The signed answer is kept, so `edition()` can trust it
 * offline for a grace period and refuses a cache that was tampered with.
 */

import {
  canonicalAnswer,
  trustedKeys,
  verifyText,
  type AnswerSignature,
  type AnswerToSign,
  type PublicKeyEntry,
  type SignedLicense,
  type TrustedKey,
} from './signature.js';

export type { AnswerSignature, PublicKeyEntry, TrustedKey };
export { canonicalAnswer, canonicalKey, trustedKeys, verifyText } from './signature.js';

/** The licence as verify describes it; the service's answers are typed by the same interface. */
export type VerifiedLicense = SignedLicense;

/** Codes with which the server definitively refuses a licence. */
export const refusalCodes = ['license_not_found', 'license_inactive', 'license_expired'] as const;
export type RefusalCode = (typeof refusalCodes)[number];

export type VerifyOutcome =
  { kind: 'valid'; license: VerifiedLicense } | { kind: 'refused'; error: RefusalCode; message: string } | { kind: 'no_news'; reason: string };

/**
 * `licensed`: the last definitive answer said the licence is usable (and, when the client knows
 * its site fingerprint, that this site is active on it). `unlicensed`: it said otherwise.
 * `unknown`: no definitive answer yet.
 */
export type Edition = 'licensed' | 'unlicensed' | 'unknown';

/** A signed activate or verify answer, as the client keeps it to check again offline. */
export interface SignedAnswer {
  action: 'activate' | 'verify';
  license: VerifiedLicense;
  activation?: { activation_id: string; reactivated: boolean };
  signature: AnswerSignature;
}

export interface EditionState {
  edition: Edition;
  license?: VerifiedLicense;
  /** Refusal code of the last definitive refusal. */
  error?: string;
  /** ISO 8601 time of the last definitive answer. */
  checkedAt?: string;
  /** The signed answer behind a `licensed` edition. */
  answer?: SignedAnswer;
  /**
   * Signing keys learnt from the server: with pinned keys, the ones they endorse (checked again
   * on every use); without, those seen first (trust on first use).
   */
  keys?: Pick<PublicKeyEntry, 'key_id' | 'public_key' | 'created_at' | 'endorsement'>[];
}

export interface SiteDetails {
  siteUrl: string;
  wpVersion?: string;
  phpVersion?: string;
  pluginVersion?: string;
}

/** A definitive failure of activate or deactivate (an error code from the server). */
export class LicenseRequestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly data?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'LicenseRequestError';
  }
}

/** The server could not be reached, timed out or answered something that is not the protocol. */
export class LicenseNetworkError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LicenseNetworkError';
  }
}

export interface LicenseClientOptions {
  /** Service base URL, e.g. `https://licences.example.com`. */
  baseUrl: string;
  /** The licence token (or its reference id). */
  key: string;
  /** This site's fingerprint; verify then says whether this site is active. */
  siteFingerprint?: string;
  /**
   * This site's home URL, sent with verify: the service answers `site_match: true` only when the
   * fingerprint is active for this URL's domain. Without it, a free activation made from a local
   * development host (localhost, *.test, ...) does not count as this site's.
   */
  siteUrl?: string;
  /** Per request; a slower answer is treated as a network error. Default 10 s. */
  timeoutMs?: number;
  /** A state saved earlier (the edition survives restarts of the tooling). */
  state?: EditionState;
  /** Called after every change of state, to persist it. */
  onChange?: (state: EditionState) => void | Promise<void>;
  fetch?: typeof fetch;
  /**
   * The service's public signing keys, pinned by the vendor (`svc license keys`). Their
   * successors are learnt from `GET /api/portal/v1/keys` through the endorsement chain. Without
   * pinned keys the client trusts the keys the server lists the first time it asks.
   */
  trustedKeys?: TrustedKey[];
  /**
   * How long a signed answer keeps the edition `licensed` without news from the server, in
   * seconds (default 7 days); never longer than the signature's own valid_until.
   */
  graceSeconds?: number;
  /** The clock (tests). */
  now?: () => Date;
}

/** Signed times may run this far ahead of the client's clock. */
const CLOCK_SKEW_MS = 5 * 60_000;
const DEFAULT_GRACE_SECONDS = 7 * 86_400;

type Answer = { status: number; body: Record<string, unknown>; headers: Headers };

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function isVerifiedLicense(body: Record<string, unknown>): boolean {
  return (
    body.status === 'ok' &&
    body.license_status === 'active' &&
    (typeof body.expires_at === 'string' || body.expires_at === null) &&
    typeof body.domain_limit === 'number' &&
    typeof body.site_match === 'boolean' &&
    typeof body.product_slug === 'string' &&
    typeof body.product_name === 'string'
  );
}

function isSignature(value: unknown): value is AnswerSignature {
  return (
    isObject(value) &&
    value.alg === 'ed25519' &&
    typeof value.key_id === 'string' &&
    typeof value.issued_at === 'string' &&
    typeof value.valid_until === 'string' &&
    typeof value.value === 'string'
  );
}

/** Whether `t` lies in the signature's window: from its issue (less clock skew) to its valid_until, and within `graceMs` of its issue. */
function signatureCurrent(answer: SignedAnswer, t: number, graceMs = Infinity): boolean {
  const issued = Date.parse(answer.signature.issued_at);
  return issued - CLOCK_SKEW_MS <= t && t < Math.min(issued + graceMs, Date.parse(answer.signature.valid_until));
}

const bare = (k: TrustedKey): TrustedKey => ({ key_id: k.key_id, public_key: k.public_key });

const licenseOf = (body: Record<string, unknown>): VerifiedLicense => ({
  license_status: 'active',
  expires_at: body.expires_at as string | null,
  domain_limit: body.domain_limit as number,
  site_match: body.site_match as boolean,
  product_slug: body.product_slug as string,
  product_name: body.product_name as string,
});

export class LicenseClient {
  private current: EditionState;

  constructor(private readonly options: LicenseClientOptions) {
    this.current = options.state ?? { edition: 'unknown' };
  }

  /** The cached edition and what the last definitive answer said. */
  get state(): EditionState {
    return this.current;
  }

  /**
   * The edition to act on now, without asking the server: `licensed` only while the kept answer
   * verifies against a trusted key, names this licence key and site, is within the grace period
   * and the signature's validity, and the licence has not passed its expiry. A kept answer that
   * fails any of these (tampered, stale) reads `unknown`.
   */
  edition(now: Date = this.now()): Edition {
    const state = this.current;
    if (state.edition !== 'licensed') return state.edition;
    return state.answer && this.answerHolds(state.answer, now) ? 'licensed' : 'unknown';
  }

  private now(): Date {
    return this.options.now?.() ?? new Date();
  }

  /** Every check of a kept answer except those that need the server. */
  private answerHolds(answer: SignedAnswer, now: Date): boolean {
    if (!this.signedByTrustedKey(answer, this.knownKeys(this.current.keys ?? []))) return false;
    const t = now.getTime();
    if (!signatureCurrent(answer, t, (this.options.graceSeconds ?? DEFAULT_GRACE_SECONDS) * 1000)) return false;
    if (this.options.siteFingerprint && !answer.license.site_match) return false;
    const expires = answer.license.expires_at ? Date.parse(`${answer.license.expires_at.replace(' ', 'T')}Z`) : undefined;
    return expires === undefined || t < expires;
  }

  /**
   * Whether a signed answer that just arrived is news: its signature is current, and it was
   * issued no earlier than the answer the client keeps, nor (beyond clock skew) before a refusal
   * the client has already heard. An old answer replayed by a proxy or a hosts-file entry is
   * therefore never taken for the server's word now, and cannot undo a revocation.
   */
  private fresh(answer: SignedAnswer): boolean {
    if (!signatureCurrent(answer, this.now().getTime())) return false;
    const issued = Date.parse(answer.signature.issued_at);
    const kept = this.current.answer ? Date.parse(this.current.answer.signature.issued_at) : undefined;
    if (kept !== undefined && issued < kept) return false;
    const refusedAt = this.current.error && this.current.checkedAt ? Date.parse(this.current.checkedAt) : undefined;
    return refusedAt === undefined || issued >= refusedAt - CLOCK_SKEW_MS;
  }

  /** Pinned keys and the kept keys they endorse; without pinned keys, the keys kept from first use. */
  private knownKeys(kept: NonNullable<EditionState['keys']>): TrustedKey[] {
    const pinned = this.options.trustedKeys;
    return trustedKeys(pinned?.length ? pinned : kept.map(bare), kept);
  }

  private signedByTrustedKey(answer: SignedAnswer, keys: TrustedKey[]): boolean {
    const key = keys.find((k) => k.key_id === answer.signature.key_id);
    if (!key) return false;
    const { value, ...head } = answer.signature;
    const toSign: AnswerToSign = {
      action: answer.action,
      licenseKey: this.options.key,
      siteFingerprint: this.options.siteFingerprint,
      license: answer.license,
      ...(answer.activation ? { activation: answer.activation } : {}),
    };
    return verifyText(canonicalAnswer(toSign, head), value, key.public_key);
  }

  /**
   * Checks a fresh answer's signature, asking the server for its keys when the signing key is
   * not known yet. Resolves to the keys to keep when the answer is trusted, undefined when not.
   */
  private async trust(answer: SignedAnswer): Promise<EditionState['keys'] | undefined> {
    const kept = this.current.keys ?? [];
    if (this.signedByTrustedKey(answer, this.knownKeys(kept))) return kept;
    let listed: PublicKeyEntry[];
    try {
      listed = await this.fetchKeys();
    } catch {
      return undefined;
    }
    const byId = new Map(kept.map((k) => [k.key_id, k]));
    for (const k of listed)
      if (!byId.has(k.key_id)) byId.set(k.key_id, { key_id: k.key_id, public_key: k.public_key, created_at: k.created_at, endorsement: k.endorsement });
    const learnt = [...byId.values()];
    // Keep what the roots vouch for: the pinned keys, else the keys kept so far, else (first
    // use without pinned keys) whatever the server lists.
    const pinned = this.options.trustedKeys;
    const roots = pinned?.length ? pinned : kept.length ? kept.map(bare) : listed.map(bare);
    const trusted = new Set(trustedKeys(roots, learnt).map((k) => k.key_id));
    const keep = learnt.filter((k) => trusted.has(k.key_id));
    return this.signedByTrustedKey(answer, this.knownKeys(keep)) ? keep : undefined;
  }

  private async fetchKeys(): Promise<PublicKeyEntry[]> {
    const url = `${this.options.baseUrl.replace(/\/+$/, '')}/api/portal/v1/keys`;
    const response = await (this.options.fetch ?? fetch)(url, {
      headers: { accept: 'application/json' },
      signal: AbortSignal.timeout(this.options.timeoutMs ?? 10_000),
    });
    const body = (await response.json()) as unknown;
    const items = isObject(body) && isObject(body.data) && Array.isArray(body.data.items) ? body.data.items : [];
    return items.filter(
      (k): k is PublicKeyEntry => isObject(k) && typeof k.key_id === 'string' && typeof k.public_key === 'string' && typeof k.created_at === 'string',
    );
  }

  /** Asks the server about the licence. Never throws; the edition changes only on `valid` or `refused`. */
  async verify(): Promise<VerifyOutcome> {
    const form: Record<string, string> = {};
    if (this.options.siteFingerprint) form.site_fingerprint = this.options.siteFingerprint;
    if (this.options.siteFingerprint && this.options.siteUrl) form.site_url = this.options.siteUrl;
    let answer: Answer;
    try {
      answer = await this.post('verify', form);
    } catch (err) {
      return { kind: 'no_news', reason: (err as Error).message };
    }
    const { status, body } = answer;
    if (status === 200 && isVerifiedLicense(body)) {
      const license = licenseOf(body);
      const signed: SignedAnswer | undefined = isSignature(body.signature) ? { action: 'verify', license, signature: body.signature } : undefined;
      const keys = signed ? await this.trust(signed) : undefined;
      // A 200 that is not signed by a trusted key for this licence and site says nothing; nor does
      // one that is no longer current or older than what the client knows (a replayed answer).
      if (!signed || !keys) return { kind: 'no_news', reason: 'the answer is not signed by a trusted key' };
      if (!this.fresh(signed)) return { kind: 'no_news', reason: 'the signed answer is out of date (older than what this client knows, or past its validity)' };
      const matches = !this.options.siteFingerprint || license.site_match;
      await this.settle({ edition: matches ? 'licensed' : 'unlicensed', license, ...(matches ? { answer: signed } : {}), keys });
      return { kind: 'valid', license };
    }
    if ((status === 403 || status === 404) && body.status === 'fail' && refusalCodes.includes(body.error as RefusalCode)) {
      const error = body.error as RefusalCode;
      await this.settle({ edition: 'unlicensed', error, ...this.keptKeys() });
      return { kind: 'refused', error, message: String(body.message ?? error) };
    }
    // 429, 5xx, a proxy's page, a malformed request: nothing was learnt about the licence.
    return { kind: 'no_news', reason: `unexpected answer ${status}${typeof body.error === 'string' ? ` (${body.error})` : ''}` };
  }

  /** Activates this site. Throws LicenseRequestError for a refusal, LicenseNetworkError when unreachable. */
  async activate(site: SiteDetails): Promise<{ activationId: string; reactivated: boolean }> {
    const fingerprint = this.requireFingerprint();
    const form: Record<string, string> = { site_url: site.siteUrl, site_fingerprint: fingerprint };
    if (site.wpVersion) form.wp_version = site.wpVersion;
    if (site.phpVersion) form.php_version = site.phpVersion;
    if (site.pluginVersion) form.plugin_version = site.pluginVersion;
    const data = this.dataOf(await this.post('activate', form));
    if (typeof data.activation_id !== 'string') throw new LicenseNetworkError('activate: the answer has no activation_id');
    const reactivated = data.reactivated === true;
    if (!isObject(data.license) || !isVerifiedLicense({ status: 'ok', ...data.license }) || !isSignature(data.signature)) {
      throw new LicenseNetworkError('activate: the answer is not a signed activation');
    }
    const signed: SignedAnswer = {
      action: 'activate',
      license: licenseOf(data.license),
      activation: { activation_id: data.activation_id, reactivated },
      signature: data.signature,
    };
    const keys = await this.trust(signed);
    if (!keys) throw new LicenseNetworkError('activate: the answer is not signed by a trusted key');
    if (!this.fresh(signed)) throw new LicenseNetworkError('activate: the signed answer is out of date');
    await this.settle({ edition: 'licensed', license: signed.license, answer: signed, keys });
    return { activationId: data.activation_id, reactivated };
  }

  /** Deactivates this site; afterwards the cached edition is `unlicensed`. */
  async deactivate(): Promise<{ activationId: string; slotFreed: boolean }> {
    const data = this.dataOf(await this.post('deactivate', { site_fingerprint: this.requireFingerprint() }));
    await this.settle({ edition: 'unlicensed', error: 'deactivated', ...this.keptKeys() });
    return { activationId: String(data.activation_id), slotFreed: data.slot_freed === true };
  }

  private requireFingerprint(): string {
    if (!this.options.siteFingerprint) throw new TypeError('LicenseClient: siteFingerprint is required for activate and deactivate');
    return this.options.siteFingerprint;
  }

  private dataOf({ status, body, headers }: Answer): Record<string, unknown> {
    if (status === 200 && body.status === 'ok' && isObject(body.data)) return body.data;
    // A server error is no answer about the licence, whatever its body says.
    if (status >= 500) throw new LicenseNetworkError(`unexpected answer ${status}${typeof body.error === 'string' ? ` (${body.error})` : ''}`);
    if (body.status === 'fail' && typeof body.error === 'string') {
      const data = isObject(body.data) ? { ...body.data } : {};
      const retryAfter = headers.get('retry-after');
      if (retryAfter) data.retry_after = Number(retryAfter);
      throw new LicenseRequestError(status, body.error, String(body.message ?? body.error), data);
    }
    throw new LicenseNetworkError(`unexpected answer ${status}`);
  }

  private keptKeys(): Pick<EditionState, 'keys'> {
    return this.current.keys ? { keys: this.current.keys } : {};
  }

  private async settle(next: Omit<EditionState, 'checkedAt'>): Promise<void> {
    this.current = { ...next, checkedAt: this.now().toISOString() };
    await this.options.onChange?.(this.current);
  }

  private async post(action: 'activate' | 'verify' | 'deactivate', form: Record<string, string>): Promise<Answer> {
    const url = `${this.options.baseUrl.replace(/\/+$/, '')}/api/portal/v1/licenses/${encodeURIComponent(this.options.key)}/${action}`;
    const doFetch = this.options.fetch ?? fetch;
    let response: Response;
    let text: string;
    try {
      response = await doFetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: new URLSearchParams(form).toString(),
        signal: AbortSignal.timeout(this.options.timeoutMs ?? 10_000),
      });
      text = await response.text();
    } catch (err) {
      throw new LicenseNetworkError(`${action}: ${(err as Error).message}`, { cause: err });
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new LicenseNetworkError(`${action}: the answer (${response.status}) is not JSON`);
    }
    if (!isObject(body)) throw new LicenseNetworkError(`${action}: the answer (${response.status}) is not a JSON object`);
    return { status: response.status, body, headers: response.headers };
  }
}
