import type { Queryable } from '../db/sql.js';
import type { Role } from './capabilities.js';
import type { AuthService, Principal } from './auth.service.js';

/** Roles from the most to the least privileged: a joint principal takes the least of its members'. */
const ROLE_ORDER: readonly Role[] = ['administrator', 'editor', 'subscriber'];

/**
 * One principal for several people acting together: it holds a capability only when every one of
 * them does, and its role is the least privileged of theirs (an administrator's shortcuts apply
 * only when all of them are administrators). `primary` (a workflow's owner) gives it its id and
 * login, for what a run records as its author.
 */
export function jointPrincipal(members: Principal[], primary: number): Principal {
  const first = members.find((m) => m.id === primary) ?? members[0]!;
  if (members.length === 1) return first;
  const role = ROLE_ORDER[Math.max(...members.map((m) => ROLE_ORDER.indexOf(m.role)))]!;
  return { id: first.id, login: first.login, role, via: first.via, can: (capability) => members.every((m) => m.can(capability)) };
}

/**
 * The people a run acts for: its workflow's owner, the author of the version that runs, whoever
 * started it by hand, and for a run_workflow child the people of the run that called it. A run
 * never holds a right one of them lacks.
 */
export class ActingUsers {
  constructor(
    private readonly sql: Queryable,
    private readonly auth: Pick<AuthService, 'principal'>,
  ) {}

  /** Each of `userIds` as a principal; undefined when one of them no longer exists. */
  async members(userIds: readonly number[]): Promise<Principal[] | undefined> {
    const ids = [...new Set(userIds)];
    const rows = await this.sql.query<{ id: number; login: string; role: string }>('select id, login, role from users where id = any(?)', [ids]);
    if (rows.length !== ids.length) return undefined;
    return rows.map((row) => this.auth.principal(row, 'app_password'));
  }

  /** The joint principal of `userIds` (see jointPrincipal); undefined when one of them no longer exists. */
  async principal(userIds: readonly number[], primary: number): Promise<Principal | undefined> {
    const members = await this.members(userIds.length ? userIds : [primary]);
    return members && jointPrincipal(members, primary);
  }
}
