import { describe, expect, it } from 'vitest';
import { Response } from 'undici';
import { EgressDeniedError, EgressPolicy, ResponseTooLargeError, isReservedAddress, limitBody, parseEgressAllow } from './egress.js';

describe('reserved addresses', () => {
  it('refuses loopback, private, link-local, unique-local, multicast, unspecified and their IPv6 disguises', () => {
    for (const address of [
      '127.0.0.1',
      '127.9.9.9',
      '10.1.2.3',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '224.0.0.1',
      '255.255.255.255',
      '::',
      '::1',
      'fe80::1',
      'fd12:3456::1',
      'ff02::1',
      '::ffff:127.0.0.1',
      '::ffff:10.0.0.1',
      '64:ff9b::7f00:1',
      '2002:7f00:1::',
      '2001::1',
    ]) {
      expect(isReservedAddress(address), address).toBe(true);
    }
  });

  it('refuses IPv4-compatible (::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d) and local-use NAT64 forms of reserved addresses', () => {
    for (const address of [
      '::127.0.0.1',
      '::7f00:1',
      '::10.0.0.1',
      '::169.254.169.254',
      '::ffff:0:127.0.0.1',
      '::ffff:0:7f00:1',
      '::ffff:0:192.168.1.1',
      '0:0:0:0:0:ffff:0:a00:1',
      '64:ff9b:1::7f00:1',
      '64:ff9b:1::808:808',
    ]) {
      expect(isReservedAddress(address), address).toBe(true);
    }
    // Their public forms are judged by the IPv4 address they carry, as the mapped form is.
    for (const address of ['::8.8.8.8', '::ffff:0:8.8.8.8']) expect(isReservedAddress(address), address).toBe(false);
  });

  it('lets public addresses through', () => {
    for (const address of ['8.8.8.8', '1.1.1.1', '172.32.0.1', '2606:4700:4700::1111', '64:ff9b::808:808', '2002:808:808::']) {
      expect(isReservedAddress(address), address).toBe(false);
    }
  });
});

describe('SVC_EGRESS_ALLOW', () => {
  it('reads names, wildcards, addresses and ranges, each with an optional port', () => {
    const rules = parseEgressAllow(' api.internal , *.corp.example:443, 10.1.0.0/16, 127.0.0.1:11435, [::1]:8080, fd00::/8, [fd00::/8]:443 ,');
    expect(rules.map((r) => ({ kind: r.kind, port: r.port }))).toEqual([
      { kind: 'name', port: undefined },
      { kind: 'wildcard', port: 443 },
      { kind: 'address', port: undefined },
      { kind: 'address', port: 11435 },
      { kind: 'address', port: 8080 },
      { kind: 'address', port: undefined },
      { kind: 'address', port: 443 },
    ]);
    expect(parseEgressAllow(undefined)).toEqual([]);
  });

  it('names the entry it cannot read', () => {
    for (const [text, message] of [
      ['api.internal:http', /api.internal:http: http is not a port/],
      ['10.0.0.0/40', /\/40 is not a prefix length/],
      ['under_score!', /is not a host name/],
      ['[::1', /is not a host name|is not an IP address/],
      ['host:70000', /70000 is not a port/],
    ] as const) {
      expect(() => parseEgressAllow(text), text).toThrow(message);
    }
  });
});

describe('EgressPolicy address checks (before and when connecting)', () => {
  const policy = (allow: string) => new EgressPolicy(parseEgressAllow(allow), 5);
  const refused = (p: EgressPolicy, url: string) => expect(() => p.precheck(new URL(url)), url).toThrow(EgressDeniedError);

  it('refuses a reserved address written in a URL, in every spelling, and any scheme but http and https', () => {
    const p = policy('');
    for (const url of [
      'http://127.0.0.1:8233/',
      'http://2130706433/',
      'http://0x7f.1/',
      'http://017700000001/',
      'http://[::ffff:127.0.0.1]/',
      'http://[::1]:8080/',
      'http://0.0.0.0/',
      'https://169.254.169.254/latest/meta-data/',
      'http://[fd00::1]/',
      'http://[::127.0.0.1]:8233/',
      'http://[::ffff:0:127.0.0.1]:8233/',
      'http://[::ffff:0:7f00:1]/',
    ]) {
      refused(p, url);
    }
    for (const url of ['file:///etc/passwd', 'ftp://example.com/', 'gopher://example.com/', 'data:text/plain,x']) refused(p, url);
    // Names are judged when they resolve, at connect time; a public address passes.
    expect(() => p.precheck(new URL('http://localhost:8233/'))).not.toThrow();
    expect(() => p.precheck(new URL('https://8.8.8.8/'))).not.toThrow();
  });

  it('lets SVC_EGRESS_ALLOW open an address or a range, on its port only when it names one', () => {
    const p = policy('127.0.0.2, 10.1.0.0/16:8443, [fd00::/8]:443');
    expect(p.addressAllowed('127.0.0.2', 80)).toBe(true);
    expect(p.addressAllowed('127.0.0.2', 5432)).toBe(true);
    expect(p.addressAllowed('127.0.0.1', 80)).toBe(false);
    expect(p.addressAllowed('10.1.200.3', 8443)).toBe(true);
    expect(p.addressAllowed('10.1.200.3', 443)).toBe(false);
    expect(p.addressAllowed('10.2.0.1', 8443)).toBe(false);
    expect(p.addressAllowed('fd12::1', 443)).toBe(true);
    expect(p.addressAllowed('fd12::1', 80)).toBe(false);
    // Public addresses need no rule.
    expect(p.addressAllowed('8.8.8.8', 25)).toBe(true);
    expect(() => p.precheck(new URL('http://10.1.0.9:8443/'))).not.toThrow();
    refused(p, 'https://10.1.0.9/');
  });

  it('judges the port a URL implies when it writes none', () => {
    const p = policy('10.0.0.5:443');
    expect(() => p.precheck(new URL('https://10.0.0.5/'))).not.toThrow();
    refused(p, 'http://10.0.0.5/');
  });
});

describe('the body of an answer, read up to the limit', () => {
  /** A response whose body is `chunks` pieces of `size` bytes; `pulled()` says how many were read from the source. */
  function answer(chunks: number, size: number, headers: Record<string, string> = {}) {
    let pulled = 0;
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (pulled === chunks) return controller.close();
        pulled++;
        controller.enqueue(new Uint8Array(size));
      },
      cancel() {
        cancelled = true;
      },
    });
    return { response: new Response(body, { headers }), pulled: () => pulled, cancelled: () => cancelled };
  }

  it('reads a body within the limit whole', async () => {
    const { response } = answer(4, 100);
    expect((await limitBody(response, 400, 'a.example').arrayBuffer()).byteLength).toBe(400);
  });

  it('fails past the limit, without reading further, and cancels the source', async () => {
    const source = answer(1000, 100);
    const read = limitBody(source.response, 1000, 'a.example').text();
    await expect(read).rejects.toBeInstanceOf(ResponseTooLargeError);
    await expect(read).rejects.toThrow(/a\.example is larger than 1000 bytes/);
    // 11 chunks pass the limit; a stream fills its queue one chunk ahead of its reader.
    expect(source.pulled()).toBeLessThanOrEqual(12);
    expect(source.cancelled()).toBe(true);
  });

  it('fails at once on a Content-Length over the limit, reading nothing of it', async () => {
    const source = answer(10, 100, { 'content-length': '1000' });
    await expect(limitBody(source.response, 999, 'a.example').arrayBuffer()).rejects.toBeInstanceOf(ResponseTooLargeError);
    expect(source.pulled()).toBeLessThanOrEqual(1);
    expect(source.cancelled()).toBe(true);
  });

  it('leaves answers without a body as they are', () => {
    const empty = new Response(null, { status: 204 });
    expect(limitBody(empty, 10, 'a.example')).toBe(empty);
  });
});
