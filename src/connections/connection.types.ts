import { defineEntity, p, type InferEntity } from '@mikro-orm/core';

export const connectionTypes = ['http_bearer', 'http_basic', 'http_header', 'openai', 'anthropic'] as const;
export type ConnectionType = (typeof connectionTypes)[number];

/** A credential nodes use. `credEncrypted` is AES-256-GCM under the service key; never returned. */
export const Connection = defineEntity({
  name: 'Connection',
  tableName: 'connections',
  properties: {
    id: p.integer().primary().autoincrement(),
    type: p.string(),
    label: p.string(),
    credEncrypted: p.text(),
    credPreview: p.string(),
    keyId: p.string(),
    extra: p.json<{ base_url: string; header_name?: string } & Record<string, unknown>>(),
    ownerId: p.integer(),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type Connection = InferEntity<typeof Connection>;
