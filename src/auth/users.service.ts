import { AppError, conflict, notFound, validationFailed } from '../platform/errors.js';
import { randomToken } from '../platform/crypto.js';
import type { UserStore } from './user.store.js';
import { isRole, roles, type Role } from './capabilities.js';
import { generateAppPassword, hashSecret, normaliseAppPassword } from './passwords.js';

const loginPattern = /^[a-z0-9_.@-]{3,60}$/i;

export interface CreatedUser {
  id: number;
  login: string;
  role: Role;
  /** Set when the password was generated: shown once, never stored in clear. */
  password?: string;
}

/** User and application-password administration, shared by the CLI, bootstrap and the API. */
export class UsersService {
  constructor(private readonly store: UserStore) {}

  async createUser(input: { login: string; role: string; password?: string; email?: string }): Promise<CreatedUser> {
    const problems = [];
    if (!loginPattern.test(input.login)) problems.push({ field: 'login', message: '3-60 letters, digits or _.@-' });
    if (!isRole(input.role)) problems.push({ field: 'role', message: `one of ${roles.join(', ')}` });
    if (input.password !== undefined && input.password.length < 8) problems.push({ field: 'password', message: 'at least 8 characters' });
    if (problems.length) throw validationFailed(problems);
    if (await this.store.countUsers({ login: input.login })) throw conflict('conflict', `User ${input.login} already exists`, { field: 'login' });
    const password = input.password ?? randomToken(15);
    const user = await this.store.insertUser({
      login: input.login,
      role: input.role,
      email: input.email ?? null,
      passwordHash: await hashSecret(password),
    });
    return { id: user.id, login: user.login, role: input.role as Role, ...(input.password ? {} : { password }) };
  }

  /** Creates an application password; the clear value is returned once and never stored. */
  async createAppPassword(login: string, name: string, secret?: string): Promise<{ id: number; login: string; name: string; password: string }> {
    if (!name.trim() || name.length > 100) throw validationFailed([{ field: 'name', message: '1-100 characters' }]);
    const password = secret ?? generateAppPassword();
    const row = await this.store.insertAppPassword(login, name, () => hashSecret(normaliseAppPassword(password)));
    if (!row) throw notFound(`User ${login}`);
    if (row === 'taken') {
      throw conflict('conflict', `User ${login} already has an application password named ${name}`, { field: 'name' });
    }
    return { id: row.id, login, name, password };
  }

  async listAppPasswords(userId: number) {
    const rows = await this.store.listAppPasswords(userId);
    return rows.map((r) => ({
      id: r.id,
      name: r.name,
      created_at: r.createdAt.toISOString(),
      last_used_at: r.lastUsedAt?.toISOString() ?? null,
      revoked_at: r.revokedAt?.toISOString() ?? null,
    }));
  }

  /** Revokes by id (scoped to the user) or by name; revocation takes effect on the next request. */
  async revokeAppPassword(userId: number, selector: { id?: number; name?: string }): Promise<void> {
    if (!(await this.store.revokeAppPassword(userId, selector))) throw notFound('Application password');
  }

  async listUsers() {
    const rows = await this.store.listUsers();
    return rows.map((u) => ({ id: u.id, login: u.login, email: u.email ?? null, role: u.role, created_at: u.createdAt.toISOString() }));
  }

  /** A user's id, login and role (a workflow's owner, whose capabilities its record nodes act with). */
  async byId(id: number): Promise<{ id: number; login: string; role: string } | undefined> {
    const user = await this.store.userById(id);
    return user ? { id: user.id, login: user.login, role: user.role } : undefined;
  }

  async findByLogin(login: string) {
    return this.store.userByLogin(login);
  }

  /** First start: create `admin` from SVC_ADMIN_PASSWORD (or a generated password) when no user exists. */
  async bootstrapAdmin(password?: string, appPassword?: string): Promise<{ created: boolean; password?: string }> {
    if ((await this.store.countUsers()) > 0) return { created: false };
    let created: CreatedUser;
    try {
      created = await this.createUser({ login: 'admin', role: 'administrator', ...(password ? { password } : {}) });
    } catch (err) {
      // Another process bootstrapped at the same moment.
      if (err instanceof AppError && err.status === 409) return { created: false };
      throw err;
    }
    if (appPassword) await this.createAppPassword('admin', 'bootstrap', appPassword);
    return { created: true, ...(created.password ? { password: created.password } : {}) };
  }
}
