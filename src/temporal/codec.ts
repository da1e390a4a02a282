import type { Payload, PayloadCodec } from '@temporalio/common';
import proto from '@temporalio/proto';
import type { KeyRing } from '../platform/crypto.js';

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
