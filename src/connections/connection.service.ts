import type { EntityManager } from '@mikro-orm/postgresql';
import type { Sql } from '../db/sql.js';
import type { KeyRing } from '../platform/crypto.js';
import { AppError, conflict, notFound } from '../platform/errors.js';
import type { Response } from 'undici';
import type { EgressPolicy, EgressRequest } from '../platform/egress.js';
import { Connection, type ConnectionType } from './connection.entity.js';

/** A connection with its credential decrypted in memory; only ever built inside an activity or probe. */
export interface ResolvedConnection {
  id: number;
  type: ConnectionType;
  baseUrl: string;
  /**
   * Sends a request within the egress policy. The credential is added for the connection's own
   * origin only: a redirect to another origin gets no credential (nor the caller's Authorization
   * or Cookie headers). There is no other way to the credential.
   */
  fetch(url: URL, init: EgressRequest): Promise<Response>;
}

export interface ConnectionView {
  id: number;
  type: string;
  label: string;
  cred_preview: string;
  extra: Record<string, unknown>;
  created_at: string;
  updated_at: string;
}

/** `sk-…a1b2`: enough to tell two keys apart, never enough to use one. */
export function previewOf(cred: string): string {
  if (cred.length <= 8) return '…' + cred.slice(-2);
  const prefix = /^[A-Za-z]{2,4}[-_]/.exec(cred)?.[0] ?? '';
  return `${prefix}…${cred.slice(-4)}`;
}

export const viewOf = (c: Connection): ConnectionView => ({
  id: c.id,
  type: c.type,
  label: c.label,
  cred_preview: c.credPreview,
  extra: c.extra,
  created_at: c.createdAt.toISOString(),
  updated_at: c.updatedAt.toISOString(),
});

export class ConnectionService {
  constructor(
    private readonly em: EntityManager,
    private readonly sql: Sql,
    private readonly keys: KeyRing,
    private readonly egress: EgressPolicy,
  ) {}

  async list(): Promise<ConnectionView[]> {
    return (await this.em.fork().find(Connection, {}, { orderBy: { id: 'asc' } })).map(viewOf);
  }

  async get(id: number): Promise<Connection> {
    const row = await this.em.fork().findOne(Connection, { id });
    if (!row) throw notFound('Connection');
    return row;
  }

  async create(input: { type: ConnectionType; label: string; cred: string; extra: Connection['extra'] }, ownerId: number): Promise<ConnectionView> {
    const em = this.em.fork();
    const row = em.create(Connection, {
      type: input.type,
      label: input.label,
      credEncrypted: this.keys.encrypt(input.cred),
      credPreview: previewOf(input.cred),
      keyId: this.keys.keyId,
      extra: input.extra,
      ownerId,
    });
    await em.flush();
    return viewOf(row);
  }

  async update(id: number, input: { label?: string; cred?: string; extra?: Connection['extra'] }): Promise<ConnectionView> {
    const em = this.em.fork();
    const row = await em.findOne(Connection, { id });
    if (!row) throw notFound('Connection');
    if (input.label !== undefined) row.label = input.label;
    if (input.extra !== undefined) row.extra = input.extra;
    if (input.cred !== undefined) {
      row.credEncrypted = this.keys.encrypt(input.cred);
      row.credPreview = previewOf(input.cred);
      row.keyId = this.keys.keyId;
    }
    await em.flush();
    return viewOf(row);
  }

  /** Active workflows whose current definition uses the connection. */
  async activeUsers(id: number): Promise<{ id: number; slug: string; title: string }[]> {
    return this.sql.query(`select id, slug, title from workflows where status = 'active' and ? = any(connection_ids) order by id`, [id]);
  }

  async delete(id: number, force: boolean): Promise<{ id: number; deleted: true; workflows: { id: number; slug: string; title: string }[] }> {
    await this.get(id);
    const users = await this.activeUsers(id);
    if (users.length && !force) {
      throw conflict('connection_in_use', `Connection ${id} is used by ${users.length} active workflow(s); pass force=true to delete anyway`, {
        workflows: users,
      });
    }
    await this.sql.query('delete from connections where id = ?', [id]);
    return { id, deleted: true, workflows: users };
  }

  /** Decrypts the credential for one use; a missing row is the node error `connection_missing`. */
  async resolve(id: number): Promise<ResolvedConnection> {
    // Plain SQL: this runs in every http_request and llm_prompt node, where the ORM's unit of
    // work costs more than the query.
    const [row] = await this.sql.query<{ id: number; type: ConnectionType; cred_encrypted: string; key_id: string; extra: Connection['extra'] }>(
      'select id, type, cred_encrypted, key_id, extra from connections where id = ?',
      [id],
    );
    if (!row) throw new AppError(404, 'connection_missing', `Connection ${id} does not exist (it was deleted)`);
    let cred: string;
    try {
      cred = this.keys.decrypt(row.cred_encrypted);
    } catch {
      throw new AppError(
        500,
        'credential_unreadable',
        `The credential of connection ${id} was sealed with a key this service does not have (key ${row.key_id}; see SVC_PREVIOUS_ENCRYPTION_KEYS)`,
      );
    }
    const type = row.type;
    const headerName = typeof row.extra.header_name === 'string' ? row.extra.header_name : 'X-API-Key';
    const authorize = (headers: Record<string, string>) => {
      switch (type) {
        case 'http_bearer':
        case 'openai':
          headers.authorization = `Bearer ${cred}`;
          break;
        case 'http_basic':
          headers.authorization = `Basic ${Buffer.from(cred).toString('base64')}`;
          break;
        case 'http_header':
          headers[headerName.toLowerCase()] = cred;
          break;
        case 'anthropic':
          headers['x-api-key'] = cred;
          headers['anthropic-version'] ??= '2023-06-01';
          break;
      }
    };
    let origin: string;
    try {
      origin = new URL(row.extra.base_url).origin;
    } catch {
      throw new AppError(400, 'validation_failed', `Connection ${id} has no usable base_url`);
    }
    const egress = this.egress;
    return {
      id: row.id,
      type,
      baseUrl: row.extra.base_url,
      fetch: (url, init) => egress.fetch(url, init, { credential: { origin, apply: authorize } }),
    };
  }
}
