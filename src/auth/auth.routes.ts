import { z } from 'zod';
import type { Context } from 'koa';
import { idParam } from '../http/pagination.js';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { unauthenticated } from '../platform/errors.js';
import { SESSION_COOKIE, type Principal } from './auth.service.js';
import type { Config } from '../config.js';
import type { AuthService } from './auth.service.js';
import type { UsersService } from './users.service.js';

const userView = z.object({
  id: z.number().int(),
  login: z.string(),
  role: z.enum(['administrator', 'editor', 'subscriber']),
  capabilities: z.array(z.string()),
});
named(userView, 'CurrentUser', {
  description: 'The signed-in user and the capabilities of their role',
  examples: [{ id: 1, login: 'admin', role: 'administrator', capabilities: ['read', 'svc_manage_workflows', 'list_users'] }],
});

const userSummary = z.object({
  id: z.number().int(),
  login: z.string(),
  email: z.string().nullable(),
  role: z.string(),
  created_at: z.string(),
});
named(userSummary, 'User', { description: 'A user as administrators list them' });

const appPasswordView = z.object({
  id: z.number().int(),
  name: z.string(),
  created_at: z.string(),
  last_used_at: z.string().nullable(),
  revoked_at: z.string().nullable(),
});
named(appPasswordView, 'AppPassword', { description: 'An application password (never its value)' });

export function authRoutes({ auth, users, config }: { auth: AuthService; users: UsersService; config: Config }): AnyRoute[] {
  /**
   * The session cookie, set and cleared with the same attributes. With SVC_COOKIE_SECURE the
   * cookie is marked Secure even when the request reached us over plain HTTP (TLS ended at a proxy
   * that TRUST_PROXY does not vouch for); Koa would otherwise refuse to send it.
   */
  const setSessionCookie = (ctx: Context, value: string, expires: Date) => {
    if (config.SVC_COOKIE_SECURE) (ctx.cookies as { secure?: boolean }).secure = true;
    ctx.cookies.set(SESSION_COOKIE, value, { httpOnly: true, sameSite: 'lax', secure: config.SVC_COOKIE_SECURE, expires, path: '/' });
  };
  const view = (p: Principal) => ({ id: p.id, login: p.login, role: p.role, capabilities: auth.capabilitiesOf(p.role) });
  const root = '/api/auth/v1';
  return [
    defineRoute({
      method: 'post',
      path: `${root}/login`,
      operationId: 'login',
      summary: 'Browser login: sets the session cookie and returns a nonce for X-Svc-Nonce',
      description:
        'Checks the login and password and opens a browser session: the answer sets the `svc_session` cookie (HttpOnly, SameSite=Lax) and carries a nonce. Requests with the cookie count as signed in only with a valid nonce in `X-Svc-Nonce`; GET /api/auth/v1/nonce gives more. Repeated failures for a login and address are refused with 429 for a while.',
      tag: 'auth',
      access: 'public',
      body: z.strictObject({ login: z.string().min(1).max(60), password: z.string().min(1).max(1024) }),
      errors: { rate_limited: 'Too many failed logins for this login and address' },
      responses: {
        200: {
          description: 'Logged in',
          data: z.object({ nonce: z.string(), expires_at: z.string(), user: userView }),
          headers: { 'Set-Cookie': { description: 'The session cookie `svc_session`', required: true } },
        },
      },
      handler: async ({ body, ctx }) => {
        const session = await auth.login(body.login, body.password, ctx.ip);
        setSessionCookie(ctx, session.cookie, session.expiresAt);
        return { data: { nonce: session.nonce, expires_at: session.expiresAt.toISOString(), user: view(session.principal) } };
      },
    }),
    defineRoute({
      method: 'get',
      path: `${root}/nonce`,
      operationId: 'getNonce',
      summary: 'A fresh nonce for the session cookie (the cookie alone suffices here)',
      description: 'For a browser that holds the session cookie but lost its nonce (a new tab, a reload). Needs the cookie only; without a valid one, 401.',
      tag: 'auth',
      access: 'public',
      checksCredentials: { accepts: ['cookie'] },
      responses: { 200: { description: 'A nonce', data: z.object({ nonce: z.string() }) } },
      handler: async ({ ctx }) => {
        const session = ctx.state.cookieSession as Principal | undefined;
        if (!session) throw unauthenticated('No valid session cookie');
        return { data: { nonce: auth.issueNonce(session.sessionId!) } };
      },
    }),
    defineRoute({
      method: 'post',
      path: `${root}/logout`,
      operationId: 'logout',
      summary: 'Ends the browser session',
      description:
        'Ends the session of the cookie and clears the cookie. `logged_out` is false when the caller used an application password (there is no session to end).',
      tag: 'auth',
      access: 'authenticated',
      responses: {
        200: {
          description: 'Logged out',
          data: z.object({ logged_out: z.boolean() }),
          headers: { 'Set-Cookie': { description: 'Clears the session cookie (expired)', required: true } },
        },
      },
      handler: async ({ principal, ctx }) => {
        if (principal.sessionId) await auth.logout(principal.sessionId);
        setSessionCookie(ctx, '', new Date(0));
        return { data: { logged_out: principal.via === 'session' } };
      },
    }),
    defineRoute({
      method: 'get',
      path: `${root}/me`,
      operationId: 'me',
      summary: 'The current user and their capabilities',
      description: 'Who the credentials belong to, their role, and the capabilities that role grants (what the other operations check).',
      tag: 'auth',
      access: 'authenticated',
      responses: { 200: { description: 'Current user', data: userView } },
      handler: async ({ principal }) => ({ data: view(principal) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/app-passwords`,
      operationId: 'listAppPasswords',
      summary: "The current user's application passwords (never their values)",
      description: 'Live and revoked application passwords of the caller, with when each was last used.',
      tag: 'auth',
      access: 'authenticated',
      responses: { 200: { description: 'Application passwords', data: z.object({ items: z.array(appPasswordView) }) } },
      handler: async ({ principal }) => ({ data: { items: await users.listAppPasswords(principal.id) } }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/app-passwords`,
      operationId: 'createAppPassword',
      summary: 'Creates an application password for the current user; the value is shown once',
      description:
        'Application passwords are what scripts and clients send with HTTP Basic (`login:password`). The value is in this answer only; the service keeps a hash. Names are unique among live passwords.',
      tag: 'auth',
      access: 'authenticated',
      body: z.strictObject({ name: z.string().min(1).max(100) }),
      responses: {
        201: { description: 'Created', data: z.object({ id: z.number().int(), login: z.string(), name: z.string(), password: z.string() }) },
      },
      errors: { conflict: 'A live application password with that name exists' },
      handler: async ({ principal, body }) => ({ status: 201, data: await users.createAppPassword(principal.login, body.name) }),
    }),
    defineRoute({
      method: 'delete',
      path: `${root}/app-passwords/{id}`,
      operationId: 'revokeAppPassword',
      summary: "Revokes one of the current user's application passwords",
      description: "The password stops working at once. An id that is not one of the caller's live passwords is answered 404.",
      tag: 'auth',
      access: 'authenticated',
      params: idParam,
      responses: { 200: { description: 'Revoked', data: z.object({ id: z.number().int(), revoked: z.boolean() }) } },
      handler: async ({ principal, params }) => {
        await users.revokeAppPassword(principal.id, { id: params.id });
        return { data: { id: params.id, revoked: true } };
      },
    }),
    defineRoute({
      method: 'get',
      path: `${root}/users`,
      operationId: 'listUsers',
      summary: 'Lists users (administrators)',
      description: 'Every user with their role and email, oldest first.',
      tag: 'auth',
      access: { capability: 'list_users' },
      responses: { 200: { description: 'Users', data: z.object({ items: z.array(userSummary) }) } },
      handler: async () => ({ data: { items: await users.listUsers() } }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/users`,
      operationId: 'createUser',
      summary: 'Creates a user; a generated password is returned once when none is given',
      description:
        'The role decides the capabilities (GET /api/auth/v1/me lists them): `administrator` (all), `editor` (workflows, records, the agent and deciding its actions) or `subscriber` (reading records). Logins are unique.',
      tag: 'auth',
      access: { capability: 'create_users' },
      body: z.strictObject({
        login: z.string().min(3).max(60),
        role: z.enum(['administrator', 'editor', 'subscriber']),
        password: z.string().min(8).max(1024).optional(),
        email: z.email().max(255).optional(),
      }),
      errors: { conflict: 'The login is taken' },
      responses: {
        201: {
          description: 'Created',
          data: z.object({ id: z.number().int(), login: z.string(), role: z.string(), password: z.string().optional() }),
        },
      },
      handler: async ({ body }) => ({ status: 201, data: await users.createUser(body) }),
    }),
  ];
}
