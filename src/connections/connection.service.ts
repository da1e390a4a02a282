import type { Principal } from '../auth/auth.service.js';
import { toIso, type Sql } from '../db/sql.js';
import type { KeyRing } from '../platform/crypto.js';
import { AppError, conflict, notFound, validationFailed } from '../platform/errors.js';
import type { Response } from 'undici';
import type { EgressAnswer, EgressPolicy, EgressRequest } from '../platform/egress.js';
import type { ConnectionExtra, ConnectionRow, ConnectionType } from './connection.types.js';
import { credentialForms, redactor, type Redact } from './redact.js';

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
  /** The same request with the answer read whole (EgressPolicy.call); with `readBody: false` not read. */
  call(url: URL, init: EgressRequest, readBody?: boolean): Promise<EgressAnswer>;
  /**
   * Replaces the credential, in every form it is sent in, with `[redacted]` in a value (a call's
   * output or error): a target that echoes its request's headers would otherwise hand it back
   * into a run's output, the timeline and Temporal's history.
   */
  redact: Redact;
}

export interface ConnectionView {
  id: number;
  type: string;
  label: string;
  cred_preview: string;
  extra: Record<string, unknown>;
  owner: { id: number; login: string };
  shared_with: number[];
  created_at: string;
  updated_at: string;
}

/** `sk-…a1b2`: enough to tell two keys apart, never enough to use one. */
export function previewOf(cred: string): string {
  if (cred.length <= 8) return '…' + cred.slice(-2);
  const prefix = /^[A-Za-z]{2,4}[-_]/.exec(cred)?.[0] ?? '';
  return `${prefix}…${cred.slice(-4)}`;
}

type ViewRow = Omit<ConnectionRow, 'cred_encrypted' | 'key_id'> & { owner_login: string };

const viewOf = (c: ViewRow): ConnectionView => ({
  id: c.id,
  type: c.type,
  label: c.label,
  cred_preview: c.cred_preview,
  extra: c.extra,
  owner: { id: c.owner_id, login: c.owner_login },
  shared_with: c.shared_with,
  created_at: toIso(c.created_at)!,
  updated_at: toIso(c.updated_at)!,
});

const VIEW = `select c.id, c.type, c.label, c.cred_preview, c.extra, c.owner_id, u.login as owner_login, c.shared_with, c.created_at, c.updated_at
  from connections c join users u on u.id = c.owner_id`;

/**
 * Who may use a connection (in a workflow node, an agent session): its owner, the users it is
 * shared with, and administrators, who manage every connection anyway. As SQL over `connections c`,
 * true when every one of the users `users` (an int[] expression) may, and all of them exist.
 */
const usableByAll = (users: string) =>
  `(select count(*) = cardinality(${users})
      and coalesce(bool_and(u.role = 'administrator' or u.id = c.owner_id or u.id = any(c.shared_with)), true)
    from users u where u.id = any(${users}))`;

/** What a connection's use reads of it: its row, and whether the users a run acts for may use it. */
export type ConnectionUse = Pick<ConnectionRow, 'id' | 'type' | 'cred_encrypted' | 'key_id' | 'extra'> & { usable: boolean };

/**
 * The read of connection `?` for its use by the users `users` (an int[] SQL expression; without
 * it, by anyone), as one row: resolve's, and for a statement that reads it beside other rows (a
 * run's first claim reads its first node's connection in the same round trip). Its answer goes
 * to ConnectionService.use.
 */
export const connectionUseSql = (users?: string) =>
  `select c.id, c.type, c.cred_encrypted, c.key_id, c.extra, ${users ? usableByAll(users) : 'true'} as usable from connections c where c.id = ?`;

/** Connections: credentials sealed at rest, masked in every view, usable by their owner and those they are shared with. */
export class ConnectionService {
  constructor(
    private readonly sql: Sql,
    private readonly keys: KeyRing,
    private readonly egress: EgressPolicy,
  ) {}

  /** Every connection for those who manage them (svc_manage_connections); for anyone else, those they may use. */
  async list(principal: Principal): Promise<ConnectionView[]> {
    const all = principal.can('svc_manage_connections');
    const rows = await this.sql.query<ViewRow>(
      `${VIEW} ${all ? '' : 'where c.owner_id = ? or ? = any(c.shared_with)'} order by c.id`,
      all ? [] : [principal.id, principal.id],
    );
    return rows.map(viewOf);
  }

  async get(id: number): Promise<ConnectionView> {
    const [row] = await this.sql.query<ViewRow>(`${VIEW} where c.id = ?`, [id]);
    if (!row) throw notFound('Connection');
    return viewOf(row);
  }

  async create(
    input: { type: ConnectionType; label: string; cred: string; extra: ConnectionExtra; shared_with?: number[] | undefined },
    ownerId: number,
  ): Promise<ConnectionView> {
    const sharedWith = await this.knownUsers(input.shared_with ?? []);
    const [row] = await this.sql.query<{ id: number }>(
      `insert into connections (type, label, cred_encrypted, cred_preview, key_id, extra, owner_id, shared_with, created_at, updated_at)
       values (?, ?, ?, ?, ?, ?, ?, ?, now(), now()) returning id`,
      [input.type, input.label, this.keys.encrypt(input.cred), previewOf(input.cred), this.keys.keyId, JSON.stringify(input.extra), ownerId, sharedWith],
    );
    return this.get(row!.id);
  }

  /**
   * Relabels, changes extra settings, rotates the credential, or changes whom it is shared with.
   * Sharing is for the owner and administrators; anyone else managing connections gets 403.
   */
  async update(
    principal: Principal,
    id: number,
    input: { label?: string | undefined; cred?: string | undefined; extra?: ConnectionExtra | undefined; shared_with?: number[] | undefined },
  ): Promise<ConnectionView> {
    const current = await this.get(id);
    let sharedWith: number[] | null = null;
    if (input.shared_with !== undefined) {
      if (principal.id !== current.owner.id && principal.role !== 'administrator') {
        throw new AppError('forbidden', 'Only the owner of a connection or an administrator shares it');
      }
      sharedWith = await this.knownUsers(input.shared_with);
    }
    await this.sql.query(
      `update connections set label = coalesce(?, label), extra = coalesce(?::jsonb, extra), shared_with = coalesce(?::int[], shared_with),
         cred_encrypted = coalesce(?, cred_encrypted), cred_preview = coalesce(?, cred_preview), key_id = coalesce(?, key_id), updated_at = now()
       where id = ?`,
      [
        input.label ?? null,
        input.extra !== undefined ? JSON.stringify(input.extra) : null,
        sharedWith,
        input.cred !== undefined ? this.keys.encrypt(input.cred) : null,
        input.cred !== undefined ? previewOf(input.cred) : null,
        input.cred !== undefined ? this.keys.keyId : null,
        id,
      ],
    );
    return this.get(id);
  }

  /** The ids as given, when every one names a user; 400 naming the unknown ones otherwise. */
  private async knownUsers(ids: number[]): Promise<number[]> {
    const unique = [...new Set(ids)];
    if (!unique.length) return [];
    const found = new Set((await this.sql.query<{ id: number }>('select id from users where id = any(?)', [unique])).map((r) => r.id));
    const problems = ids.flatMap((userId, i) => (found.has(userId) ? [] : [{ field: `shared_with.${i}`, message: `user ${userId} does not exist` }]));
    if (problems.length) throw validationFailed(problems);
    return unique;
  }

  /** Of `ids`, those every one of `userIds` may use (see usableByAll). */
  async usableBy(ids: number[], userIds: number[]): Promise<Set<number>> {
    if (!ids.length) return new Set();
    const rows = await this.sql.query<{ id: number }>(`select c.id from connections c where c.id = any(?) and ${usableByAll('?::int[]')}`, [
      ids,
      userIds,
      userIds,
    ]);
    return new Set(rows.map((r) => r.id));
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

  /**
   * Decrypts the credential for one use; a missing row is the node error `connection_missing`.
   * With `usableBy` (the people a run or session acts for) a connection one of them may not use
   * is refused with 403 `forbidden`.
   */
  async resolve(id: number, usableBy?: number[]): Promise<ResolvedConnection> {
    const [row] = await this.sql.query<ConnectionUse>(connectionUseSql(usableBy ? '?::int[]' : undefined), usableBy ? [usableBy, usableBy, id] : [id], {
      prepared: true,
    });
    return this.use(id, row);
  }

  /**
   * Connection `id` made usable from its row as connectionUseSql read it (undefined or null: there
   * is none): the same answers and refusals as resolve.
   */
  use(id: number, row: ConnectionUse | null | undefined): ResolvedConnection {
    if (!row) throw new AppError('connection_missing', `Connection ${id} does not exist (it was deleted)`);
    if (!row.usable) throw new AppError('forbidden', `Connection ${id} is not shared with everyone this run acts for`);
    let cred: string;
    try {
      cred = this.keys.decrypt(row.cred_encrypted);
    } catch {
      throw new AppError(
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
      throw new AppError('validation_failed', `Connection ${id} has no usable base_url`);
    }
    const egress = this.egress;
    return {
      id: row.id,
      type,
      baseUrl: row.extra.base_url,
      fetch: (url, init) => egress.fetch(url, init, { credential: { origin, apply: authorize } }),
      call: (url, init, readBody) => egress.call(url, init, { credential: { origin, apply: authorize }, ...(readBody === false ? { readBody } : {}) }),
      redact: redactor(credentialForms(cred, type)),
    };
  }
}
