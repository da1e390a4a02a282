import { raw } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Sql } from '../db/sql.js';
import { AppPassword, Session, User } from './auth.entities.js';

/** A user's row as authentication reads it, joined with one of their live application passwords. */
export interface Credential {
  user_id: number;
  login: string;
  role: string;
  ap_id: number;
  secret_hash: string;
}

/**
 * The one owner of `users`, `app_passwords` and `sessions`. They are MikroORM entities, so every
 * write goes through the entities (a fresh fork of the entity manager per call); the two reads
 * made on every authenticated request (an application password's user, a session's user) are
 * single joined statements through the Sql helper. Nothing else in the service writes these tables.
 */
export class UserStore {
  constructor(
    private readonly em: EntityManager,
    private readonly sql: Sql,
  ) {}

  // --- users -------------------------------------------------------------------------------

  async countUsers(where: { login?: string } = {}): Promise<number> {
    return this.em.fork().count(User, where);
  }

  async insertUser(input: { login: string; role: string; email: string | null; passwordHash: string }): Promise<User> {
    const em = this.em.fork();
    const user = em.create(User, input);
    await em.flush();
    return user;
  }

  async userById(id: number): Promise<User | null> {
    return this.em.fork().findOne(User, { id });
  }

  async userByLogin(login: string): Promise<User | null> {
    return this.em.fork().findOne(User, { login });
  }

  async listUsers(): Promise<User[]> {
    return this.em.fork().find(User, {}, { orderBy: { id: 'asc' } });
  }

  // --- application passwords ---------------------------------------------------------------

  /** Creates a live application password; undefined when the login does not exist, `taken` when the user already has a live one of that name. */
  async insertAppPassword(login: string, name: string, secretHash: () => Promise<string>): Promise<AppPassword | 'taken' | undefined> {
    const em = this.em.fork();
    const user = await em.findOne(User, { login });
    if (!user) return undefined;
    if (await em.count(AppPassword, { user, name, revokedAt: null })) return 'taken';
    const row = em.create(AppPassword, { user, name, secretHash: await secretHash() });
    await em.flush();
    return row;
  }

  async listAppPasswords(userId: number): Promise<AppPassword[]> {
    return this.em.fork().find(AppPassword, { user: userId }, { orderBy: { id: 'asc' } });
  }

  /** Revokes one live application password of the user (by id or by name); false when none matched. */
  async revokeAppPassword(userId: number, selector: { id?: number; name?: string }): Promise<boolean> {
    const em = this.em.fork();
    const row = await em.findOne(AppPassword, { user: userId, revokedAt: null, ...selector });
    if (!row) return false;
    row.revokedAt = new Date();
    await em.flush();
    return true;
  }

  /** The live application passwords of a login with their user (every Basic-authenticated request). */
  async credentials(login: string): Promise<Credential[]> {
    return this.sql.query<Credential>(
      `select u.id as user_id, u.login, u.role, ap.id as ap_id, ap.secret_hash
         from users u join app_passwords ap on ap.user_id = u.id and ap.revoked_at is null
        where u.login = ?`,
      [login],
      { prepared: true },
    );
  }

  /** Stamps an application password's last use (informative; the caller throttles it). */
  async touchAppPassword(id: number): Promise<void> {
    await this.em.fork().nativeUpdate(AppPassword, { id }, { lastUsedAt: raw('now()') });
  }

  // --- browser sessions --------------------------------------------------------------------

  async insertSession(userId: number, id: string, expiresAt: Date): Promise<void> {
    const em = this.em.fork();
    em.create(Session, { id, user: em.getReference(User, userId), expiresAt });
    await em.flush();
  }

  /** The user of a live session (every cookie-authenticated request). */
  async sessionUser(id: string): Promise<{ id: number; login: string; role: string } | undefined> {
    const rows = await this.sql.query<{ id: number; login: string; role: string }>(
      `select u.id, u.login, u.role from sessions s join users u on u.id = s.user_id
        where s.id = ? and s.revoked_at is null and s.expires_at > now()`,
      [id],
    );
    return rows[0];
  }

  async revokeSession(id: string): Promise<void> {
    await this.em.fork().nativeUpdate(Session, { id }, { revokedAt: raw('now()') });
  }
}
