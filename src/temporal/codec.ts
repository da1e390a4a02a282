import type { Payload, PayloadCodec, SerializationContext } from '@temporalio/common';
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
 * What a payload was sealed for, authenticated with it (AES-GCM additional data) and named in its
 * metadata: `activity` (an activity's input, result, heartbeat or failure: a node's output is
 * one, and its shape is the workflow author's) or `workflow` (a run's input, result, memo, an
 * update's or signal's argument, a child run's input: what the service itself shapes). A payload
 * sealed for an activity is never taken where a workflow payload is expected, so a node output
 * shaped like a run's input cannot be copied out of one history into a forged start.
 */
type Scope = 'activity' | 'workflow';
const SCOPE_KEY = 'encryption-scope';
const scopeOf = (context: SerializationContext | undefined): Scope => (context?.type === 'activity' ? 'activity' : 'workflow');
/** Each scope's name and additional data as bytes, made once: every payload of a scope carries the same. */
const scopeBytes = (scope: Scope) => ({ name: text.encode(scope), aad: text.encode(`svc/temporal-payload/${scope}`) });
const SCOPES: Record<Scope, { name: Uint8Array; aad: Uint8Array }> = { activity: scopeBytes('activity'), workflow: scopeBytes('workflow') };
const aadOf = (scope: Scope) => SCOPES[scope].aad;
const ENCODING_BYTES = text.encode(ENCODING);

/**
 * Encrypts every Temporal payload (node inputs and outputs, agent messages, failure messages)
 * under the service key, so Temporal's history holds ciphertext; each is sealed for its scope.
 * The key id travels in the metadata for rotation. Its `decode` reads a history: it decrypts the
 * service's payloads, whatever their scope, and passes any other payload through unchanged (what
 * Temporal itself writes in clear, such as its markers' details); the worker decodes with
 * TrustedInputCodec instead.
 */
export class EncryptionCodec implements PayloadCodec {
  private readonly keyIdBytes: Uint8Array;

  constructor(private readonly keys: KeyRing) {
    this.keyIdBytes = text.encode(keys.keyId);
  }

  async encode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    const scope = scopeOf(context);
    // The metadata's bytes are the same for every payload of a scope; each payload gets copies of its own.
    return payloads.map((payload) => ({
      metadata: { encoding: ENCODING_BYTES.slice(), 'encryption-key-id': this.keyIdBytes.slice(), [SCOPE_KEY]: SCOPES[scope].name.slice() },
      data: this.keys.encryptBytes(PayloadMessage.encode(payload).finish(), aadOf(scope)),
    }));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => (isEncrypted(payload) ? this.decrypt(payload) : payload));
  }

  /**
   * One of the service's payloads, decrypted and authenticated, with the scope it was sealed for
   * (undefined for one sealed before scopes existed); throws when it was not sealed with one of
   * the service's keys for the scope its metadata names.
   */
  open(payload: Payload): { payload: Payload; scope: Scope | undefined } {
    const keyId = read.decode(payload.metadata!['encryption-key-id'] ?? new Uint8Array());
    const named = payload.metadata![SCOPE_KEY];
    const scope = named ? (read.decode(named) as Scope) : undefined;
    if (scope !== undefined && scope !== 'activity' && scope !== 'workflow') throw new Error(`unknown payload scope ${scope}`);
    const plain = this.keys.decryptBytes(payload.data ?? new Uint8Array(), keyId, scope ? aadOf(scope) : undefined);
    return { payload: PayloadMessage.decode(plain) as Payload, scope };
  }

  /** One of the service's payloads, decrypted and authenticated; throws when it was not sealed with one of its keys. */
  decrypt(payload: Payload): Payload {
    return this.open(payload).payload;
  }
}

/** What the worker's codec hands over for a payload the service did not produce: its encoding only, no bytes. */
const untrusted = (): Payload => ({ metadata: { encoding: text.encode(UNTRUSTED_ENCODING) } });

/**
 * The worker's codec: it takes as input only what the service produced for that place. A payload
 * is decrypted when it is the service's ciphertext (AES-256-GCM authenticates it) sealed for the
 * scope it arrives in (an activity's payloads in an activity's place, a workflow's in a
 * workflow's); anything else (plaintext sent with the Temporal CLI or UI, bytes that claim to be
 * ciphertext but do not decrypt, a node's output copied into a run's input) becomes an
 * `untrusted` payload without its bytes, which the workflows' data converter and interceptors
 * refuse with `untrusted_input` (workflows/trust.ts). Payloads sealed before scopes existed (runs
 * in flight across the upgrade) are taken in any place. Encoding is the service codec's.
 */
export class TrustedInputCodec implements PayloadCodec {
  constructor(private readonly codec: EncryptionCodec) {}

  encode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    return this.codec.encode(payloads, context);
  }

  async decode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    const expected = scopeOf(context);
    return payloads.map((payload) => {
      if (!isEncrypted(payload)) return untrusted();
      try {
        const opened = this.codec.open(payload);
        return opened.scope === undefined || opened.scope === expected ? opened.payload : untrusted();
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
