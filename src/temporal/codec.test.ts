import { defaultPayloadConverter, type Payload, type SerializationContext } from '@temporalio/common';
import proto from '@temporalio/proto';
import { describe, expect, it } from 'vitest';
import { UNTRUSTED_ENCODING } from '../../workflows/defs.js';
import { KeyRing, generateMasterKey, parseMasterKey } from '../platform/crypto.js';
import { EncryptionCodec, TrustedInputCodec, transcode } from './codec.js';

const keys = new KeyRing(parseMasterKey(generateMasterKey()));
const codec = new EncryptionCodec(keys);
const worker = new TrustedInputCodec(codec);
const workflow: SerializationContext = { type: 'workflow', namespace: 'default', workflowId: 'svc-execution-1' };
const activity: SerializationContext = { type: 'activity', namespace: 'default', workflowId: 'svc-execution-1', activityId: 'node:a', isLocal: false };
const text = new TextDecoder();
const encodingOf = (p: Payload) => text.decode(p.metadata!.encoding!);
const valueOf = (p: Payload) => defaultPayloadConverter.fromPayload(p);
const input = defaultPayloadConverter.toPayload({ workflowId: 2, payload: {}, trigger: 'manual' });

describe("the worker's codec", () => {
  it("takes the service's ciphertext sealed for the place it arrives in", async () => {
    const [sealed] = await codec.encode([input], workflow);
    expect(text.decode(sealed!.metadata!['encryption-scope']!)).toBe('workflow');
    const [opened] = await worker.decode([sealed!], workflow);
    expect(valueOf(opened!)).toEqual({ workflowId: 2, payload: {}, trigger: 'manual' });
    const [fromActivity] = await codec.encode([input], activity);
    expect(valueOf((await worker.decode([fromActivity!], activity))[0]!)).toEqual({ workflowId: 2, payload: {}, trigger: 'manual' });
  });

  it('hands over anything else as untrusted, without its bytes', async () => {
    const [sealedForActivity] = await codec.encode([input], activity);
    // The same bytes relabelled for a workflow's place do not authenticate either.
    const relabelled = { ...sealedForActivity!, metadata: { ...sealedForActivity!.metadata, 'encryption-scope': new TextEncoder().encode('workflow') } };
    const otherKey = await new EncryptionCodec(new KeyRing(parseMasterKey(generateMasterKey()))).encode([input], workflow);
    const forged = {
      metadata: { encoding: new TextEncoder().encode('binary/encrypted'), 'encryption-key-id': new TextEncoder().encode(keys.keyId) },
      data: new Uint8Array(40),
    };
    const decoded = await worker.decode([input, sealedForActivity!, relabelled, otherKey[0]!, forged], workflow);
    for (const payload of decoded) {
      expect(encodingOf(payload)).toBe(UNTRUSTED_ENCODING);
      expect(payload.data ?? new Uint8Array()).toHaveLength(0);
    }
  });

  it('takes a payload sealed before scopes existed in any place (runs in flight across the upgrade)', async () => {
    const legacy: Payload = {
      metadata: { encoding: new TextEncoder().encode('binary/encrypted'), 'encryption-key-id': new TextEncoder().encode(keys.keyId) },
      data: keys.encryptBytes(proto.temporal.api.common.v1.Payload.encode(input).finish()),
    };
    expect(valueOf((await worker.decode([legacy], workflow))[0]!)).toEqual({ workflowId: 2, payload: {}, trigger: 'manual' });
    expect(valueOf((await worker.decode([legacy], activity))[0]!)).toEqual({ workflowId: 2, payload: {}, trigger: 'manual' });
  });
});

describe('reading a history (the codec endpoints, reset points)', () => {
  it("decrypts the service's payloads of any scope and passes other payloads through", async () => {
    const [a] = await codec.encode([input], activity);
    const [w] = await codec.encode([input], workflow);
    const decoded = await codec.decode([a!, w!, input]);
    expect(decoded.map(valueOf)).toEqual([0, 1, 2].map(() => ({ workflowId: 2, payload: {}, trigger: 'manual' })));
  });

  it('encodes nothing for a caller: the codec server answers payloads as they came', async () => {
    const body = { payloads: [{ metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from('{}').toString('base64') }] };
    expect(await transcode(codec, 'encode', body)).toEqual(body);
  });
});
