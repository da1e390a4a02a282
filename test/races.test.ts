import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.js';

/**
 * Creates that check for a duplicate and then insert can lose a race to a simultaneous twin. The
 * database's unique index decides, and the loser gets the same 409 naming the field that a
 * sequential duplicate gets, never a 500.
 */
let app: TestApp;

beforeAll(async () => {
  app = await startTestApp();
});
afterAll(async () => {
  await app?.close();
});

async function race(n: number, send: () => Promise<{ status: number; body: any }>) {
  const answers = await Promise.all(Array.from({ length: n }, send));
  return { ok: answers.filter((a) => a.status === 201), refused: answers.filter((a) => a.status !== 201) };
}

describe('simultaneous creates of one name', () => {
  it('workflow slug: one 201, the rest 409 conflict naming slug', async () => {
    const body = { title: 'Twin', slug: 'twin-slug', trigger: { type: 'manual' }, nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }], edges: [] };
    const { ok, refused } = await race(8, () => app.admin.post('/api/workflow/v1/workflows', body));
    expect(ok).toHaveLength(1);
    for (const answer of refused) expect(answer).toMatchObject({ status: 409, body: { status: 'fail', error: 'conflict', data: { field: 'slug' } } });
  });

  it('workflows without a slug: every create succeeds, each with its own slug from the title', async () => {
    const body = { title: 'Same Title', trigger: { type: 'manual' }, nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }], edges: [] };
    for (let round = 0; round < 3; round++) {
      const { ok, refused } = await race(8, () => app.admin.post('/api/workflow/v1/workflows', body));
      expect(refused.map((r) => r.body)).toEqual([]);
      expect(new Set(ok.map((a) => a.body.data.slug)).size).toBe(8);
    }
  });

  it('user login: one 201, the rest 409 conflict naming login', async () => {
    const { ok, refused } = await race(8, () => app.admin.post('/api/auth/v1/users', { login: 'twin', role: 'editor', password: 'twin-password-1' }));
    expect(ok).toHaveLength(1);
    for (const answer of refused) expect(answer).toMatchObject({ status: 409, body: { error: 'conflict', data: { field: 'login' } } });
  });

  it('application password name: one 201, the rest 409 conflict naming name', async () => {
    const { ok, refused } = await race(6, () => app.admin.post('/api/auth/v1/app-passwords', { name: 'twin-script' }));
    expect(ok).toHaveLength(1);
    for (const answer of refused) expect(answer).toMatchObject({ status: 409, body: { error: 'conflict', data: { field: 'name' } } });
    const [{ n }] = (await app.sql<{ n: string }>(`select count(*) as n from app_passwords where name = 'twin-script' and revoked_at is null`)) as [
      { n: string },
    ];
    expect(Number(n)).toBe(1);
  });

  it('entity slug: one 201, the rest 409 conflict naming slug', async () => {
    const body = { slug: 'twin', name: 'Twin', schema: { fields: { title: { type: 'string' } } } };
    const { ok, refused } = await race(5, () => app.admin.post('/api/management/v1/entities', body));
    expect(ok).toHaveLength(1);
    for (const answer of refused) expect(answer).toMatchObject({ status: 409, body: { error: 'conflict', data: { field: 'slug' } } });
  });
});
