import type { Payload, PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';
import { z } from 'zod';
import type { KeyRing } from '../platform/crypto.js';
import { invalidRequest } from '../platform/errors.js';

// @temporalio/proto is CommonJS: under plain Node ESM only its default export is importable.
const { Payload: PayloadMessage } = proto.temporal.api.common.v1;
const ENCODING = 'binary/encrypted';
const text = new TextEncoder();
const read = new TextDecoder();

/**
 * Encrypts every Temporal payload (node inputs and outputs, agent messages) under the service
 * key, so Temporal's history holds ciphertext. The key id travels in the metadata for rotation.
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
    return payloads.map((payload) => {
      const encoding = payload.metadata?.encoding;
      if (!encoding || read.decode(encoding) !== ENCODING) return payload;
      const keyId = read.decode(payload.metadata!['encryption-key-id'] ?? new Uint8Array());
      const plain = this.keys.decryptBytes(payload.data ?? new Uint8Array(), keyId);
      return PayloadMessage.decode(plain) as Payload;
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
 * authenticated endpoint and the embedded default's loopback listener. A payload that does not
 * decrypt (another deployment's key, altered bytes) is the caller's 400, not a server fault.
 */
export async function transcode(codec: PayloadCodec, operation: 'decode' | 'encode', body: CodecPayloads): Promise<CodecPayloads> {
  const input = body.payloads.map((p) => ({
    metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
    data: Buffer.from(p.data ?? '', 'base64'),
  }));
  let output: Payload[];
  try {
    output = await codec[operation](input);
  } catch {
    throw invalidRequest(`A payload could not be ${operation}d with this service's keys`);
  }
  return { payloads: output.map((p) => ({ metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, b64(v)])), data: b64(p.data) })) };
}
