import { describe, expect, it } from 'vitest';
import { AppError } from '../platform/errors.js';
import { admittedOrigin, codecOperation, codecRequestPayloads, type CodecRequestHead } from './codec.listener.js';

/** The status and code a check refuses with (it throws the service's AppError). */
function refusal(check: () => unknown): { status: number; code: string } | undefined {
  try {
    check();
    return undefined;
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return { status: err.status, code: err.code };
  }
}

const hosts = new Set(['127.0.0.1:7239', 'localhost:7239']);
const origins = new Set(['http://127.0.0.1:8233', 'http://localhost:8233']);

describe('admittedOrigin', () => {
  it('answers a request addressed to a loopback name of the listener, whatever the case', () => {
    expect(admittedOrigin({ host: '127.0.0.1:7239' }, hosts, origins)).toBeUndefined();
    expect(admittedOrigin({ host: 'LOCALHOST:7239', origin: 'http://localhost:8233' }, hosts, origins)).toBe('http://localhost:8233');
  });

  it('refuses another host name (a rebound one), another port and no host at all', () => {
    for (const host of ['evil.example:7239', '127.0.0.1:7240', '127.0.0.1', undefined]) {
      expect(refusal(() => admittedOrigin({ host }, hosts, origins))).toEqual({ status: 403, code: 'forbidden' });
    }
  });

  it('refuses a page other than the Web UI’s, before anything else is checked', () => {
    const head: CodecRequestHead = { host: '127.0.0.1:7239', origin: 'https://other.example', url: '/nowhere', method: 'GET' };
    expect(refusal(() => admittedOrigin(head, hosts, origins))).toEqual({ status: 403, code: 'forbidden' });
  });
});

describe('codecOperation', () => {
  const post = { method: 'POST', contentType: 'application/json' };
  it('takes the operation from the last path segment, wherever the endpoint is mounted', () => {
    expect(codecOperation({ ...post, url: '/decode' })).toBe('decode');
    expect(codecOperation({ ...post, url: '/some/prefix/encode?x=1' })).toBe('encode');
    expect(codecOperation({ method: 'POST', contentType: 'Application/JSON; charset=utf-8', url: '/decode' })).toBe('decode');
  });

  it('answers a preflight to either operation', () => {
    expect(codecOperation({ method: 'OPTIONS', url: '/decode' })).toBe('preflight');
  });

  it('refuses another path (404) before the method (405) and the body type (415)', () => {
    expect(refusal(() => codecOperation({ method: 'GET', url: '/' }))).toEqual({ status: 404, code: 'not_found' });
    expect(refusal(() => codecOperation({ method: 'OPTIONS', url: '/decode/more' }))).toEqual({ status: 404, code: 'not_found' });
    expect(refusal(() => codecOperation({ method: 'GET', url: '/decode' }))).toEqual({ status: 405, code: 'method_not_allowed' });
    // A form post or a plain-text post (no CORS preflight) is refused before any work.
    for (const contentType of ['application/x-www-form-urlencoded', 'text/plain', 'application/jsonx', undefined]) {
      expect(refusal(() => codecOperation({ method: 'POST', url: '/decode', contentType }))).toEqual({ status: 415, code: 'unsupported_media_type' });
    }
  });
});

describe('codecRequestPayloads', () => {
  it('takes payloads in the codec server protocol', () => {
    const body = { payloads: [{ metadata: { encoding: 'YmluYXJ5L3BsYWlu' }, data: 'aGk=' }, {}] };
    expect(codecRequestPayloads(body)).toEqual(body);
  });

  it('refuses anything else with 400', () => {
    for (const json of [null, [], { payloads: 'x' }, { payloads: [{ data: 1 }] }, { payloads: [], extra: true }]) {
      expect(refusal(() => codecRequestPayloads(json))).toEqual({ status: 400, code: 'invalid_request' });
    }
  });
});
