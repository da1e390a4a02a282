import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { webhookSignature } from './license-webhook.activities.js';

// What a vendor checks on each delivery (Svc-Signature, documented on the webhooks route): the
// HMAC-SHA256, in hex, of `<unix time>.<body>` under the webhook's secret, as Stripe signs.
describe('Svc-Signature of a licence webhook delivery', () => {
  const body = '{"id":"evt_1","type":"license.activated"}';

  it('matches a vector computed independently (openssl dgst -sha256 -hmac)', () => {
    expect(webhookSignature('whsec_test', 1767225600, body)).toBe('t=1767225600,v1=a0ae6de02b184a08305eeb60200baf05fea68c6f8654e68044e8819f57d830c0');
  });

  it('signs the time with the body, so neither can be swapped', () => {
    const signed = webhookSignature('whsec_test', 1767225600, body);
    expect(webhookSignature('whsec_test', 1767225601, body).split(',v1=')[1]).not.toBe(signed.split(',v1=')[1]);
    expect(webhookSignature('whsec_test', 1767225600, body.replace('evt_1', 'evt_2'))).not.toBe(signed);
    expect(webhookSignature('whsec_other', 1767225600, body)).not.toBe(signed);
  });

  it('is what a vendor recomputes from the header and the raw body', () => {
    const header = webhookSignature('s3cret', 1700000000, body);
    const { t, v1 } = Object.fromEntries(header.split(',').map((part) => part.split('=') as [string, string]));
    expect(v1).toBe(createHmac('sha256', 's3cret').update(`${t}.${body}`).digest('hex'));
  });
});
