import { describe, expect, it } from 'vitest';
import { siteDomain } from './domain.js';

describe('siteDomain', () => {
  it.each([
    ['https://example.com', 'example.com'],
    ['https://Example.COM/', 'example.com'],
    ['https://www.example.com', 'example.com'],
    ['http://WWW.Example.com:8443/shop/?p=1#top', 'example.com'],
    ['https://example.com./', 'example.com'],
    ['example.com/blog', 'example.com'],
    ['  https://example.com  ', 'example.com'],
    ['https://user:secret@example.com/', 'example.com'],
    ['https://shop.example.com', 'shop.example.com'],
    ['https://www.shop.example.com', 'shop.example.com'],
    ['https://wwwexample.com', 'wwwexample.com'],
    ['https://Bücher.de/katalog', 'xn--bcher-kva.de'],
    ['https://www.BÜCHER.de', 'xn--bcher-kva.de'],
    ['https://xn--bcher-kva.de', 'xn--bcher-kva.de'],
    ['https://例え.jp', 'xn--r8jz45g.jp'],
  ])('%s counts as %s', (url, domain) => {
    expect(siteDomain(url)).toEqual({ domain, local: false });
  });

  it.each([
    ['http://localhost', 'localhost'],
    ['http://localhost:8888/wp', 'localhost'],
    ['localhost:8888', 'localhost'],
    ['http://127.0.0.1:8080', '127.0.0.1'],
    ['http://127.0.1.1', '127.0.1.1'],
    ['http://[::1]:8080/', '[::1]'],
    ['https://mysite.local', 'mysite.local'],
    ['https://www.mysite.local', 'mysite.local'],
    ['http://shop.localhost', 'shop.localhost'],
    ['https://plugin-dev.test/', 'plugin-dev.test'],
    ['https://münchen.test', 'xn--mnchen-3ya.test'],
  ])('%s is a local development host (%s) and takes no slot', (url, domain) => {
    expect(siteDomain(url)).toEqual({ domain, local: true });
  });

  it.each([['example.localhost.com'], ['test.example.com'], ['local.example.org'], ['128.0.0.1']])('%s is not local', (host) => {
    expect(siteDomain(`https://${host}`)?.local).toBe(false);
  });

  it.each([
    [''],
    ['   '],
    ['https://'],
    ['ftp://example.com'],
    ['mailto:someone@example.com'],
    ['http://exa mple.com'],
    ['https://.'],
    ['example.com:port/x'],
    ['http://a..b'],
    [`https://${'abcdefghi.'.repeat(26)}com`],
  ])('%j names no usable domain', (url) => {
    expect(siteDomain(url)).toBeUndefined();
  });
});
