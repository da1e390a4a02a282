import { describe, expect, it } from 'vitest';
import { KeyRing } from '../platform/crypto.js';
import { readApprovalToken, signApprovalToken } from './approval-tokens.js';

const ring = new KeyRing(Buffer.alloc(32, 7));
const other = new KeyRing(Buffer.alloc(32, 8));
const token = { actionId: '6a4f2c1e-8b3d-4e5f-9a0b-1c2d3e4f5a6b', userId: 42, expiresAt: 2_000_000_000 };

describe('approval tokens', () => {
  it('round-trip for one approver and one action, as a URL path segment', () => {
    const text = signApprovalToken(ring, token);
    expect(text).toMatch(/^[0-9a-f-]+\.[0-9a-z]+\.[0-9a-z]+\.[A-Za-z0-9_-]+$/);
    expect(encodeURIComponent(text)).toBe(text);
    expect(readApprovalToken(ring, text, 1_900_000_000)).toEqual(token);
  });

  it('are refused when altered anywhere, signed under another key, or malformed', () => {
    const text = signApprovalToken(ring, token);
    const [a, u, e, s] = text.split('.') as [string, string, string, string];
    const flip = (x: string) => (x.endsWith('a') ? `${x.slice(0, -1)}b` : `${x.slice(0, -1)}a`);
    for (const altered of [
      `${a}.${(43).toString(36)}.${e}.${s}`,
      `${a}.${u}.${(2_000_000_001).toString(36)}.${s}`,
      `${a.replace(/^6/, '7')}.${u}.${e}.${s}`,
      `${a}.${u}.${e}.${flip(s)}`,
      `${a}.${u}.${e}`,
      `${a}.${u}.${e}.${s}.x`,
      `${a}.0${u}.${e}.${s}`,
      'x.y.z.w',
      '',
    ]) {
      expect(readApprovalToken(ring, altered, 0), altered).toBe('invalid');
    }
    expect(readApprovalToken(other, text, 0)).toBe('invalid');
  });

  it('die at the expiry they carry', () => {
    const text = signApprovalToken(ring, token);
    expect(readApprovalToken(ring, text, token.expiresAt - 1)).toEqual(token);
    expect(readApprovalToken(ring, text, token.expiresAt)).toBe('expired');
  });
});
