import { describe, expect, it } from 'vitest';
import type { Queryable } from '../db/sql.js';
import { ActingUsers, jointPrincipal } from './acting.js';
import type { Principal } from './auth.service.js';
import { capabilities, capabilitiesOf, hasCapability, isRole, type Role } from './capabilities.js';

const byDefault = { svc_agent_use: 'edit_posts' };

/** A principal as AuthService.principal makes one: its role's capabilities, with svc_agent_use mapped. */
const person = (id: number, role: Role, map = byDefault): Principal => ({
  id,
  login: `${role}${id}`,
  role,
  via: 'app_password',
  can: (capability) => hasCapability(role, capability, map),
});

describe('roles and capabilities', () => {
  it('gives each role its documented capabilities', () => {
    expect(capabilitiesOf('administrator', byDefault)).toEqual([...capabilities]);
    expect(capabilitiesOf('editor', byDefault)).toEqual([
      'read',
      'edit_posts',
      'svc_agent_use',
      'svc_agent_approve',
      'svc_view_records',
      'svc_create_records',
      'svc_edit_records',
      'svc_delete_records',
      'svc_manage_workflows',
    ]);
    expect(capabilitiesOf('subscriber', byDefault)).toEqual(['read', 'svc_view_records']);
  });

  it('keeps the administrator-only capabilities from editors', () => {
    for (const capability of ['svc_manage_entities', 'svc_manage_connections', 'svc_manage_licenses', 'svc_decode_payloads', 'list_users', 'create_users']) {
      expect(hasCapability('editor', capability, byDefault), capability).toBe(false);
      expect(hasCapability('administrator', capability, byDefault), capability).toBe(true);
    }
  });

  it('maps svc_agent_use to the host capability SVC_AGENT_CAPABILITY names', () => {
    expect(hasCapability('subscriber', 'svc_agent_use', byDefault)).toBe(false);
    expect(hasCapability('subscriber', 'svc_agent_use', { svc_agent_use: 'read' })).toBe(true);
    expect(hasCapability('editor', 'svc_agent_use', { svc_agent_use: 'svc_manage_entities' })).toBe(false);
    expect(capabilitiesOf('subscriber', { svc_agent_use: 'read' })).toContain('svc_agent_use');
    // An administrator holds everything, whatever the mapping.
    expect(hasCapability('administrator', 'svc_agent_use', { svc_agent_use: 'no_such_capability' })).toBe(true);
  });

  it('grants nothing unknown to anyone but an administrator', () => {
    expect(hasCapability('editor', 'manage_options', byDefault)).toBe(false);
    expect(hasCapability('editor', 'toString', byDefault)).toBe(false);
    expect(hasCapability('subscriber', '', byDefault)).toBe(false);
  });

  it('knows its roles', () => {
    expect(['administrator', 'editor', 'subscriber'].every(isRole)).toBe(true);
    expect(isRole('author')).toBe(false);
    expect(isRole('constructor')).toBe(false);
  });
});

describe('a joint principal (people acting together)', () => {
  it('holds a capability only when every member does, and the least privileged role', () => {
    const joint = jointPrincipal([person(1, 'administrator'), person(2, 'editor')], 1);
    expect(joint.role).toBe('editor');
    expect(joint.can('svc_manage_workflows')).toBe(true);
    expect(joint.can('svc_manage_connections')).toBe(false);
    const withSubscriber = jointPrincipal([person(1, 'administrator'), person(2, 'editor'), person(3, 'subscriber')], 2);
    expect(withSubscriber.role).toBe('subscriber');
    expect(withSubscriber.can('svc_view_records')).toBe(true);
    expect(withSubscriber.can('svc_create_records')).toBe(false);
  });

  it('keeps an administrator’s shortcuts only when all of them are administrators', () => {
    const admins = jointPrincipal([person(1, 'administrator'), person(2, 'administrator')], 2);
    expect(admins.role).toBe('administrator');
    expect(admins.can('create_users')).toBe(true);
  });

  it('takes its id and login from the primary member (a workflow’s owner), whatever the order', () => {
    const joint = jointPrincipal([person(1, 'editor'), person(7, 'administrator')], 7);
    expect(joint).toMatchObject({ id: 7, login: 'administrator7', role: 'editor' });
    // A primary that is not among them: the first member.
    expect(jointPrincipal([person(4, 'editor'), person(5, 'editor')], 99)).toMatchObject({ id: 4 });
  });

  it('is the member itself when there is one', () => {
    const alone = person(3, 'subscriber');
    expect(jointPrincipal([alone], 3)).toBe(alone);
  });

  it('holds svc_agent_use when SVC_AGENT_CAPABILITY maps it to a capability every member holds', () => {
    const opened = { svc_agent_use: 'read' };
    expect(jointPrincipal([person(1, 'editor', opened), person(2, 'subscriber', opened)], 1).can('svc_agent_use')).toBe(true);
    expect(jointPrincipal([person(1, 'editor'), person(2, 'subscriber')], 1).can('svc_agent_use')).toBe(false);
  });
});

describe('ActingUsers', () => {
  const users = [
    { id: 1, login: 'owner', role: 'administrator' },
    { id: 2, login: 'author', role: 'editor' },
  ];
  /** The users table, as `select id, login, role from users where id = any(?)` reads it. */
  const table: Queryable = {
    query: async <T>(_text: string, params?: unknown[]) => users.filter((u) => (params![0] as number[]).includes(u.id)) as T[],
  };
  const acting = new ActingUsers(table, { principal: (user, via) => ({ ...person(user.id, user.role as Role), login: user.login, via }) });

  it('joins the people of a run, each counted once', async () => {
    const joint = await acting.principal([2, 1, 2], 1);
    expect(joint).toMatchObject({ id: 1, login: 'owner', role: 'editor' });
    expect(joint!.can('svc_manage_connections')).toBe(false);
  });

  it('acts for the primary alone when no one else is named', async () => {
    expect(await acting.principal([], 1)).toMatchObject({ id: 1, role: 'administrator' });
  });

  it('acts for nobody once one of them no longer exists', async () => {
    expect(await acting.principal([1, 3], 1)).toBeUndefined();
    expect(await acting.members([3])).toBeUndefined();
  });
});
