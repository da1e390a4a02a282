/**
 * A small typed client of the public licence endpoints, for a plugin's own Node tooling (build
 * scripts, test harnesses, a site's sync job). At run time it imports nothing from the server (its
 * one import is the type of the verify answer, erased on compilation).
 *
 * SPEC section 4: a network error on verify is no news, and only a definitive answer changes the
 * site's edition. So `verify()` never throws: it answers `valid`, `refused` or `no_news`, and the
 * cached edition moves only on the first two.
 */

import type { VerifyResult } from './license.service.js';

/** The licence as verify describes it; the server's own type, so client and server cannot drift. */
export type VerifiedLicense = VerifyResult;

/** Codes with which the server definitively refuses a licence. */
export const refusalCodes = ['license_not_found', 'license_inactive', 'license_expired'] as const;
export type RefusalCode = (typeof refusalCodes)[number];

export type VerifyOutcome =
  | { kind: 'valid'; license: VerifiedLicense }
  | { kind: 'refused'; error: RefusalCode; message: string }
  | { kind: 'no_news'; reason: string };

/**
 * `licensed`: the last definitive answer said the licence is usable (and, when the client knows
 * its site fingerprint, that this site is active on it). `unlicensed`: it said otherwise.
 * `unknown`: no definitive answer yet.
 */
export type Edition = 'licensed' | 'unlicensed' | 'unknown';

export interface EditionState {
  edition: Edition;
  license?: VerifiedLicense;
  /** Refusal code of the last definitive refusal. */
  error?: string;
  /** ISO 8601 time of the last definitive answer. */
  checkedAt?: string;
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
  /** Per request; a slower answer is treated as a network error. Default 10 s. */
  timeoutMs?: number;
  /** A state saved earlier (the edition survives restarts of the tooling). */
  state?: EditionState;
  /** Called after every change of state, to persist it. */
  onChange?: (state: EditionState) => void | Promise<void>;
  fetch?: typeof fetch;
}

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

export class LicenseClient {
  private current: EditionState;

  constructor(private readonly options: LicenseClientOptions) {
    this.current = options.state ?? { edition: 'unknown' };
  }

  /** The cached edition and what the last definitive answer said. */
  get state(): EditionState {
    return this.current;
  }

  /** Asks the server about the licence. Never throws; the edition changes only on `valid` or `refused`. */
  async verify(): Promise<VerifyOutcome> {
    const form: Record<string, string> = {};
    if (this.options.siteFingerprint) form.site_fingerprint = this.options.siteFingerprint;
    let answer: Answer;
    try {
      answer = await this.post('verify', form);
    } catch (err) {
      return { kind: 'no_news', reason: (err as Error).message };
    }
    const { status, body } = answer;
    if (status === 200 && isVerifiedLicense(body)) {
      const { status: _ok, ...license } = body as unknown as VerifiedLicense & { status: 'ok' };
      const matches = !this.options.siteFingerprint || license.site_match;
      await this.settle({ edition: matches ? 'licensed' : 'unlicensed', license });
      return { kind: 'valid', license };
    }
    if ((status === 403 || status === 404) && body.status === 'fail' && refusalCodes.includes(body.error as RefusalCode)) {
      const error = body.error as RefusalCode;
      await this.settle({ edition: 'unlicensed', error });
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
    return { activationId: data.activation_id, reactivated: data.reactivated === true };
  }

  /** Deactivates this site; afterwards the cached edition is `unlicensed`. */
  async deactivate(): Promise<{ activationId: string; slotFreed: boolean }> {
    const data = this.dataOf(await this.post('deactivate', { site_fingerprint: this.requireFingerprint() }));
    await this.settle({ edition: 'unlicensed', error: 'deactivated' });
    return { activationId: String(data.activation_id), slotFreed: data.slot_freed === true };
  }

  private requireFingerprint(): string {
    if (!this.options.siteFingerprint) throw new TypeError('LicenseClient: siteFingerprint is required for activate and deactivate');
    return this.options.siteFingerprint;
  }

  private dataOf({ status, body, headers }: Answer): Record<string, unknown> {
    if (status === 200 && body.status === 'ok' && isObject(body.data)) return body.data;
    if (body.status === 'fail' && typeof body.error === 'string') {
      const data = isObject(body.data) ? { ...body.data } : {};
      const retryAfter = headers.get('retry-after');
      if (retryAfter) data.retry_after = Number(retryAfter);
      throw new LicenseRequestError(status, body.error, String(body.message ?? body.error), data);
    }
    throw new LicenseNetworkError(`unexpected answer ${status}`);
  }

  private async settle(next: Omit<EditionState, 'checkedAt'>): Promise<void> {
    this.current = { ...next, checkedAt: new Date().toISOString() };
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
