import { createCipheriv, createDecipheriv, createSecretKey, randomBytes, randomFillSync } from 'node:crypto';
import { KeyRing } from '../../src/platform/crypto.js';
import { EncryptionCodec, TrustedInputCodec } from '../../src/temporal/codec.js';
const ring = new KeyRing(randomBytes(32));
const codec = new EncryptionCodec(ring);
const trusted = new TrustedInputCodec(codec);
const text = new TextEncoder();
const payload = { metadata: { encoding: text.encode('json/plain') }, data: text.encode(JSON.stringify({ a: 'x'.repeat(200), n: 1 })) };
const N = 20000;
async function time(name: string, fn: () => unknown) {
  for (let i = 0; i < 2000; i++) await fn();
  const c0 = process.cpuUsage(); const t0 = performance.now();
  for (let i = 0; i < N; i++) await fn();
  const c = process.cpuUsage(c0);
  console.log(name, ((performance.now() - t0) * 1000 / N).toFixed(2), 'us wall', ((c.user + c.system) / N).toFixed(2), 'us cpu');
}
const enc = (await codec.encode([payload], { type: 'activity' } as any))[0]!;
await time('encode', () => codec.encode([payload], { type: 'activity' } as any));
await time('decode trusted', () => trusted.decode([enc], { type: 'activity' } as any));
const key = randomBytes(32); const ko = createSecretKey(key);
await time('randomBytes12', () => randomBytes(12));
await time('cipheriv buf', () => { const c = createCipheriv('aes-256-gcm', key, randomBytes(12)); c.update(payload.data); c.final(); c.getAuthTag(); });
await time('cipheriv keyobj', () => { const c = createCipheriv('aes-256-gcm', ko, randomBytes(12)); c.update(payload.data); c.final(); c.getAuthTag(); });
const pool = Buffer.alloc(12 * 4096); let at = pool.length;
const iv = () => { if (at + 12 > pool.length) { randomFillSync(pool); at = 0; } const v = Buffer.from(pool.subarray(at, at + 12)); at += 12; return v; };
await time('cipheriv keyobj pooled iv', () => { const c = createCipheriv('aes-256-gcm', ko, iv()); c.update(payload.data); c.final(); c.getAuthTag(); });
