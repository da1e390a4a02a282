import type { Payload, PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';
import { z } from 'zod';
import type { KeyRing } from '../platform/crypto.js';
import { invalidRequest } from '../platform/errors.js';
import { UNTRUSTED_ENCODING } from '../../workflows/defs.js';

// @temporalio/proto is CommonJS: under plain Node ESM only its default export is importable.
const { Payload: PayloadMessage } = proto.temporal.api.common.v1;
const ENCODING = 'binary/encrypted';
const text = new TextEncoder();
const read = new TextDecoder();

const isEncrypted = (payload: Payload) => {
  const encoding = payload.metadata?.encoding;
  return Boolean(encoding) && read.decode(encoding!) === ENCODING;
};

/**
 * Encrypts every Temporal payload (node inputs and outputs, agent messages, failure messages)
 * under the service key, so Temporal's history holds ciphertext. The key id travels in the
 * metadata for rotation. Its `decode` reads a history: it decrypts the service's payloads and
 * passes any other payload through unchanged (what Temporal itself writes in clear, such as its
 * markers' details); the worker decodes with TrustedInputCodec instead.
 */
export class EncryptionCodec implements PayloadCodec {
  constructor(private readonly keys: KeyRing) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => ({
      metadata: { encoding: text.encode(ENCODING), 'encryption-key-id': text.encode(this.keys.keyId) },
      data: this.keys.encryptBytes(PayloadMessage.encode(payload).finish()),
    }));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => (isEncrypted(payload) ? this.decrypt(payload) : payload));
  }

  /** One of the service's payloads, decrypted and authenticated; throws when it was not sealed with one of its keys. */
  decrypt(payload: Payload): Payload {
    const keyId = read.decode(payload.metadata!['encryption-key-id'] ?? new Uint8Array());
    const plain = this.keys.decryptBytes(payload.data ?? new Uint8Array(), keyId);
    return PayloadMessage.decode(plain) as Payload;
  }
}

/** What the worker's codec hands over for a payload the service did not produce: its encoding only, no bytes. */
const untrusted = (): Payload => ({ metadata: { encoding: text.encode(UNTRUSTED_ENCODING) } });

/**
 * The worker's codec: it takes as input only what the service produced. A payload is decrypted
 * when it is the service's ciphertext (AES-256-GCM authenticates it); anything else (plaintext
 * sent with the Temporal CLI or UI, bytes that claim to be ciphertext but do not decrypt) becomes
 * an `untrusted` payload without its bytes, which the workflows' data converter and interceptors
 * refuse with `untrusted_input` (workflows/trust.ts). Encoding is the service codec's.
 */
export class TrustedInputCodec implements PayloadCodec {
  constructor(private readonly codec: EncryptionCodec) {}

  encode(payloads: Payload[]): Promise<Payload[]> {
    return this.codec.encode(payloads);
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      if (!isEncrypted(payload)) return untrusted();
      try {
        return this.codec.decrypt(payload);
      } catch {
        return untrusted();
      }
    });
  }
}

/** A codec server request or answer: Temporal Payloads as JSON, metadata values and data in base64. */
export const codecPayloads = z.strictObject({
  payloads: z.array(z.strictObject({ metadata: z.record(z.string(), z.string()).optional(), data: z.string().optional() })).max(1000),
});
export type CodecPayloads = z.infer<typeof codecPayloads>;

const b64 = (bytes: Uint8Array | null | undefined) => Buffer.from(bytes ?? new Uint8Array()).toString('base64');

/**
 * One codec server call (the protocol the Temporal Web UI and CLI speak), shared by the API's
 * authenticated endpoint and the embedded default's loopback listener. Decoding decrypts the
 * service's payloads; a payload that does not decrypt (another deployment's key, altered bytes)
 * is the caller's 400, not a server fault. Encoding encrypts nothing: the payloads are answered as
 * they came, so nothing a caller sends through the UI or the CLI (a workflow it starts, an update)
 * becomes input the worker trusts.
 */
export async function transcode(codec: EncryptionCodec, operation: 'decode' | 'encode', body: CodecPayloads): Promise<CodecPayloads> {
  if (operation === 'encode') return { payloads: body.payloads };
  const input = body.payloads.map((p) => ({
    metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
    data: Buffer.from(p.data ?? '', 'base64'),
  }));
  let output: Payload[];
  try {
    output = await codec.decode(input);
  } catch {
    throw invalidRequest("A payload could not be decoded with this service's keys");
  }
  return { payloads: output.map((p) => ({ metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, b64(v)])), data: b64(p.data) })) };
}
