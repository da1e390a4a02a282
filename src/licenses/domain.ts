import { domainToASCII } from 'node:url';

/** The domain a site occupies on a licence, and whether it takes a slot. */
export interface SiteDomain {
  /** Host of the site URL: lower case, punycode, without `www.`, port, path or trailing dot. */
  domain: string;
  /** Local development hosts (localhost, 127.0.0.0/8, ::1, *.local, *.localhost, *.test) take no slot. */
  local: boolean;
}

const schemePattern = /^[a-z][a-z0-9+.-]*:\/\//i;
// `mailto:x@example.com` has a scheme but no `//`; `example.com:8080` has a port, not a scheme.
const otherSchemePattern = /^[a-z][a-z0-9+.-]*:(?!\d)/i;
const localSuffixes = ['.local', '.localhost', '.test'];

function isLocal(domain: string): boolean {
  if (domain === 'localhost' || domain === '[::1]') return true;
  if (/^127(\.\d{1,3}){3}$/.test(domain)) return true;
  return localSuffixes.some((suffix) => domain.endsWith(suffix));
}

/**
 * Normalises a site's home URL to the domain that counts against a licence's limit, or returns
 * undefined when it names no usable host. A URL without a scheme is read as http, because site
 * owners paste `example.com/shop` as often as the full URL.
 */
export function siteDomain(siteUrl: string): SiteDomain | undefined {
  const text = siteUrl.trim();
  if (!text) return undefined;
  if (!schemePattern.test(text) && otherSchemePattern.test(text)) return undefined;
  let url: URL;
  try {
    url = new URL(schemePattern.test(text) ? text : `http://${text}`);
  } catch {
    return undefined;
  }
  // Only http(s) hosts are parsed as domains (and so lower-cased and punycoded) by the URL parser.
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
  // The URL parser already applies IDNA to http(s) hosts; domainToASCII makes the rule explicit
  // and rejects hosts it cannot encode (it returns '').
  let domain = url.hostname.startsWith('[') ? url.hostname : domainToASCII(url.hostname);
  domain = domain.toLowerCase().replace(/\.$/, '');
  if (domain.startsWith('www.')) domain = domain.slice(4);
  // 253 characters is the most DNS allows in a name.
  if (!domain || domain.length > 253 || domain.startsWith('.') || domain.includes('..')) return undefined;
  return { domain, local: isLocal(domain) };
}
