import { defineEntity, p, type InferEntity } from '@mikro-orm/core';

export const User = defineEntity({
  name: 'User',
  tableName: 'users',
  properties: {
    id: p.integer().primary().autoincrement(),
    login: p.string().unique(),
    email: p.string().nullable(),
    passwordHash: p.string(),
    role: p.string(),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type User = InferEntity<typeof User>;

/** Application password of an external caller; only its argon2id hash is stored. */
export const AppPassword = defineEntity({
  name: 'AppPassword',
  tableName: 'app_passwords',
  properties: {
    id: p.integer().primary().autoincrement(),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    name: p.string(),
    secretHash: p.string(),
    createdAt: p.datetime().onCreate(() => new Date()),
    lastUsedAt: p.datetime().nullable(),
    revokedAt: p.datetime().nullable(),
  },
});
export type AppPassword = InferEntity<typeof AppPassword>;

/** Browser session behind the signed cookie; revoking the row logs the browser out. */
export const Session = defineEntity({
  name: 'Session',
  tableName: 'sessions',
  properties: {
    id: p.string().primary(),
    user: () => p.manyToOne(User).deleteRule('cascade'),
    createdAt: p.datetime().onCreate(() => new Date()),
    expiresAt: p.datetime(),
    revokedAt: p.datetime().nullable(),
  },
});
export type Session = InferEntity<typeof Session>;
