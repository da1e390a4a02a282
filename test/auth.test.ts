import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_APP_PASSWORD, ADMIN_PASSWORD, startTestApp, type TestApp } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

let app: TestApp;
const logs: string[] = [];

beforeAll(async () => {
  app = await startTestApp({ logs, env: { SVC_LOGIN_MAX_FAILURES: '3' } });
});
afterAll(async () => app?.close());

async function login(login: string, password: string) {
  const res = await app.anonymous.post('/api/auth/v1/login', { login, password });
  const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0]!;
  return { res, cookie, nonce: res.body?.data?.nonce as string };
}

describe('application passwords (HTTP Basic)', () => {
  it('accepts the bootstrapped admin application password, with or without its spaces', async () => {
    const res = await app.admin.get('/api/auth/v1/me');
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ login: 'admin', role: 'administrator' });
    expect(res.body.data.capabilities).toContain('svc_manage_entities');
    const compact = app.client({ login: 'admin', password: ADMIN_APP_PASSWORD.replace(/ /g, '') });
    expect((await compact.get('/api/auth/v1/me')).status).toBe(200);
  });

  it('answers 401 in the envelope for a wrong application password, unknown user or other scheme', async () => {
    for (const client of [app.client({ login: 'admin', password: 'wrong wrong wrong wrong' }), app.client({ login: 'nobody', password: ADMIN_APP_PASSWORD })]) {
      const res = await client.get('/api/auth/v1/me');
      expect(res.status).toBe(401);
      expect(res.body).toMatchObject({ status: 'fail', error: 'unauthenticated' });
    }
    const bearer = await app.anonymous.get('/api/auth/v1/me', { headers: { authorization: 'Bearer abc' } });
    expect(bearer.status).toBe(401);
    expect(bearer.body.error).toBe('unauthenticated');
  });

  it('rejects the account password over Basic: only application passwords are accepted there', async () => {
    const res = await app.client({ login: 'admin', password: ADMIN_PASSWORD }).get('/api/auth/v1/me');
    expect(res.status).toBe(401);
  });

  it('stops accepting an application password as soon as it is revoked', async () => {
    const editor = await app.createUser('editor');
    const created = await editor.client.post('/api/auth/v1/app-passwords', { name: 'ci' });
    expect(created.status).toBe(201);
    const ci = app.client({ login: editor.login, password: created.body.data.password });
    expect((await ci.get('/api/auth/v1/me')).status).toBe(200);
    const listed = await editor.client.get('/api/auth/v1/app-passwords');
    expect(listed.body.data.items.map((i: { name: string }) => i.name)).toEqual(['tests', 'ci']);
    expect(JSON.stringify(listed.body)).not.toContain(created.body.data.password);
    // Its use shows in the list (stamped in the background, by the database's clock).
    const used = await eventually(
      async () => {
        const items = (await editor.client.get('/api/auth/v1/app-passwords')).body.data.items as {
          name: string;
          created_at: string;
          last_used_at: string | null;
        }[];
        return items.find((i) => i.name === 'ci' && i.last_used_at !== null);
      },
      10_000,
      'last_used_at of ci',
    );
    expect(Date.parse(used.last_used_at!)).toBeGreaterThanOrEqual(Date.parse(used.created_at));
    const revoked = await editor.client.delete(`/api/auth/v1/app-passwords/${created.body.data.id}`);
    expect(revoked.status).toBe(200);
    const after = await ci.get('/api/auth/v1/me');
    expect(after.status).toBe(401);
    // Another user cannot revoke it: their lookup is scoped to their own passwords.
    const other = await app.createUser('editor');
    const foreign = await other.client.delete(`/api/auth/v1/app-passwords/${created.body.data.id}`);
    expect(foreign.status).toBe(404);
  });

  it('stores application passwords hashed with argon2id', async () => {
    const rows = await app.sql<{ secret_hash: string }>('select secret_hash from app_passwords');
    for (const row of rows) expect(row.secret_hash).toMatch(/^\$argon2id\$/);
  });
});

describe('browser sessions (cookie + X-Svc-Nonce)', () => {
  it('logs in with the account password and sets an HttpOnly, SameSite=Lax cookie', async () => {
    const { res } = await login('admin', ADMIN_PASSWORD);
    expect(res.status).toBe(200);
    const setCookie = res.headers.get('set-cookie') ?? '';
    expect(setCookie).toMatch(/svc_session=/);
    expect(setCookie.toLowerCase()).toContain('httponly');
    expect(setCookie.toLowerCase()).toContain('samesite=lax');
  });

  it('treats a cookie without a valid nonce as unauthenticated and accepts it with one', async () => {
    const { cookie, nonce } = await login('admin', ADMIN_PASSWORD);
    const without = await app.client({ cookie }).get('/api/auth/v1/me');
    expect(without.status).toBe(401);
    const forged = await app.client({ cookie, nonce: `${Math.floor(Date.now() / 1000) + 3600}.forged` }).get('/api/auth/v1/me');
    expect(forged.status).toBe(401);
    const expired = await app.client({ cookie, nonce: nonce.replace(/^\d+/, '1000') }).get('/api/auth/v1/me');
    expect(expired.status).toBe(401);
    const withNonce = await app.client({ cookie, nonce }).get('/api/auth/v1/me');
    expect(withNonce.status).toBe(200);
    expect(withNonce.body.data.login).toBe('admin');
  });

  it('binds a nonce to its session and issues fresh ones for the cookie alone', async () => {
    const first = await login('admin', ADMIN_PASSWORD);
    const second = await login('admin', ADMIN_PASSWORD);
    expect((await app.client({ cookie: first.cookie, nonce: second.nonce }).get('/api/auth/v1/me')).status).toBe(401);
    const fresh = await app.client({ cookie: first.cookie }).get('/api/auth/v1/nonce');
    expect(fresh.status).toBe(200);
    expect((await app.client({ cookie: first.cookie, nonce: fresh.body.data.nonce }).get('/api/auth/v1/me')).status).toBe(200);
    expect((await app.anonymous.get('/api/auth/v1/nonce')).status).toBe(401);
  });

  it('rejects a tampered cookie and ends the session on logout', async () => {
    const { cookie, nonce } = await login('admin', ADMIN_PASSWORD);
    const tampered = cookie.replace(/\.(\d+)\./, (_, n) => `.${Number(n) + 1000}.`);
    expect((await app.client({ cookie: tampered, nonce }).get('/api/auth/v1/me')).status).toBe(401);
    const out = await app.client({ cookie, nonce }).post('/api/auth/v1/logout');
    expect(out.status).toBe(200);
    expect((await app.client({ cookie, nonce }).get('/api/auth/v1/me')).status).toBe(401);
  });

  it('slows down wrong passwords: after the limit even the right one is refused with 429 and Retry-After', async () => {
    const user = await app.createUser('subscriber');
    for (let i = 0; i < 3; i++) expect((await login(user.login, 'not-the-password')).res.status).toBe(401);
    const limited = await login(user.login, user.password);
    expect(limited.res.status).toBe(429);
    expect(limited.res.body.error).toBe('rate_limited');
    expect(Number(limited.res.headers.get('retry-after'))).toBeGreaterThan(0);
    // Other accounts are unaffected.
    expect((await login('admin', ADMIN_PASSWORD)).res.status).toBe(200);
  });
});

describe('the failure limit under concurrent guesses', () => {
  it('lets exactly the limit of parallel wrong passwords be checked, by form login and by Basic', async () => {
    const user = await app.createUser('subscriber');
    const viaForm = await Promise.all(Array.from({ length: 40 }, () => login(user.login, 'not-the-password').then((r) => r.res.status)));
    expect(viaForm.filter((s) => s === 401)).toHaveLength(3);
    expect(viaForm.filter((s) => s === 429)).toHaveLength(37);
    const other = await app.createUser('subscriber');
    const guesser = app.client({ login: other.login, password: 'wrong wrong wrong wrong' });
    const viaBasic = await Promise.all(Array.from({ length: 40 }, () => guesser.get('/api/auth/v1/me').then((r) => r.status)));
    expect(viaBasic.filter((s) => s === 401)).toHaveLength(3);
    expect(viaBasic.filter((s) => s === 429)).toHaveLength(37);
  });

  it('a right password is taken back from the count: logging in often is not guessing', async () => {
    const user = await app.createUser('subscriber');
    for (let i = 0; i < 6; i++) expect((await login(user.login, user.password)).res.status).toBe(200);
    expect((await login(user.login, 'not-the-password')).res.status).toBe(401);
    expect((await login(user.login, user.password)).res.status).toBe(200);
  });
});

describe('guesses spread over many login names', () => {
  let limited: TestApp;
  beforeAll(async () => {
    limited = await startTestApp({ env: { SVC_LOGIN_MAX_FAILURES_PER_ADDRESS: '5', TRUST_PROXY: 'true' } });
  });
  afterAll(async () => limited?.close());

  it('are limited per client address, so unknown logins cannot buy unlimited password hashing', async () => {
    const from = (address: string, loginName: string) =>
      limited.client({ login: loginName, password: 'some guess' }).get('/api/auth/v1/me', { headers: { 'x-forwarded-for': address } });
    const statuses = await Promise.all(Array.from({ length: 30 }, (_, i) => from('198.51.100.7', `nobody-${i}`).then((r) => r.status)));
    expect(statuses.filter((s) => s === 401)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(25);
    // Another address still gets its answers, and so does the right password from it.
    expect((await from('198.51.100.8', 'nobody-x')).status).toBe(401);
    expect((await limited.admin.get('/api/auth/v1/me', { headers: { 'x-forwarded-for': '198.51.100.9' } })).status).toBe(200);
  });
});

describe('capabilities', () => {
  it('answers 403 naming the missing capability, and 200 for a role that has it', async () => {
    const subscriber = await app.createUser('subscriber');
    const denied = await subscriber.client.get('/api/auth/v1/users');
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ status: 'fail', error: 'forbidden', data: { capability: 'list_users' } });
    const editor = await app.createUser('editor');
    expect((await editor.client.post('/api/auth/v1/users', { login: 'x-user', role: 'editor' })).status).toBe(403);
    const ok = await app.admin.get('/api/auth/v1/users');
    expect(ok.status).toBe(200);
    expect(ok.body.data.items.some((u: { login: string }) => u.login === subscriber.login)).toBe(true);
  });

  it('gives each role its documented capabilities', async () => {
    const editor = await app.createUser('editor');
    const subscriber = await app.createUser('subscriber');
    const editorCaps = (await editor.client.get('/api/auth/v1/me')).body.data.capabilities;
    const subscriberCaps = (await subscriber.client.get('/api/auth/v1/me')).body.data.capabilities;
    expect(editorCaps).toEqual(
      expect.arrayContaining(['edit_posts', 'svc_agent_use', 'svc_agent_approve', 'svc_view_records', 'svc_delete_records', 'svc_manage_workflows']),
    );
    expect(editorCaps).not.toContain('svc_manage_entities');
    expect(subscriberCaps.sort()).toEqual(['read', 'svc_view_records']);
  });

  it('creates users through the API, returning a generated password once', async () => {
    const res = await app.admin.post('/api/auth/v1/users', { login: 'made-by-api', role: 'subscriber' });
    expect(res.status).toBe(201);
    expect(res.body.data.password).toEqual(expect.any(String));
    const again = await app.admin.post('/api/auth/v1/users', { login: 'made-by-api', role: 'subscriber' });
    expect(again.status).toBe(409);
    const bad = await app.admin.post('/api/auth/v1/users', { login: 'x', role: 'king' });
    expect(bad.status).toBe(400);
    expect(bad.body.data.errors.map((e: { field: string }) => e.field).sort()).toEqual(['login', 'role']);
  });
});

describe('logs', () => {
  it('never contain passwords, application passwords, cookies or Authorization headers', async () => {
    // A user of its own for the wrong password: the admin account's sign-in limit stays whole for
    // the other tests, whatever order they run in.
    const user = await app.createUser('subscriber');
    await login(user.login, 'a-wrong-password-123');
    const { cookie, nonce } = await login(user.login, user.password);
    await app.client({ cookie, nonce }).get('/api/auth/v1/me');
    await app.admin.get('/api/auth/v1/me');
    await app.anonymous.request('POST', '/api/auth/v1/login', { raw: `{"login":"admin","password":"${ADMIN_PASSWORD}"`, contentType: 'application/json' });
    const text = logs.join('\n');
    expect(text).toContain('request_id');
    for (const secret of [
      ADMIN_PASSWORD,
      user.password,
      'a-wrong-password-123',
      ADMIN_APP_PASSWORD,
      cookie.split('=')[1]!,
      nonce,
      Buffer.from(`admin:${ADMIN_APP_PASSWORD}`).toString('base64'),
    ]) {
      expect(text).not.toContain(secret);
    }
  });
});
