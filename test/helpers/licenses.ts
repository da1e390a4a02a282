import { createHash, randomBytes } from 'node:crypto';
import type { TestApp } from './app.js';
import type { HttpClient, HttpResponse } from './http.js';

export interface IssuedLicense {
  id: number;
  token: string;
  reference_id: string;
  status: string;
  domain_limit: number;
  expires_at: string | null;
}

/** Issues a licence through the management API as the administrator. */
export async function issueLicense(app: TestApp, overrides: Record<string, unknown> = {}): Promise<IssuedLicense> {
  const res = await app.admin.post('/api/management/v1/licenses', {
    product_slug: 'seo-suite',
    product_name: 'SEO Suite Pro',
    domain_limit: 2,
    ...overrides,
  });
  if (res.status !== 201) throw new Error(`issuing a licence failed: ${res.status} ${res.text}`);
  return res.body.data;
}

/** A site as a plugin describes it: its home URL and a fingerprint (SHA-256 of URL + secret). */
export function site(url: string, secret = randomBytes(8).toString('hex')) {
  return {
    site_url: url,
    site_fingerprint: createHash('sha256')
      .update(url + secret)
      .digest('hex'),
  };
}

/** One call of the public licence root, form-encoded as plugins send it. */
export function portal(
  client: HttpClient,
  key: string,
  action: 'activate' | 'verify' | 'deactivate',
  form: Record<string, string> = {},
  headers: Record<string, string> = {},
): Promise<HttpResponse> {
  return client.request('POST', `/api/portal/v1/licenses/${encodeURIComponent(key)}/${action}`, { form, headers });
}
