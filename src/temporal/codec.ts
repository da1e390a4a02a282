import type { Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import type { KeyRing } from '../platform/crypto.js';

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
      data: this.keys.encryptBytes(temporal.api.common.v1.Payload.encode(payload).finish()),
    }));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      const encoding = payload.metadata?.encoding;
      if (!encoding || read.decode(encoding) !== ENCODING) return payload;
      const keyId = read.decode(payload.metadata!['encryption-key-id'] ?? new Uint8Array());
      const plain = this.keys.decryptBytes(payload.data ?? new Uint8Array(), keyId);
      return temporal.api.common.v1.Payload.decode(plain) as Payload;
    });
  }
}
