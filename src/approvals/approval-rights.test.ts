import { describe, expect, it } from 'vitest';
import type { Principal } from '../auth/auth.service.js';
import { approvalRights, refusalOf } from './approval.service.js';

const person = (id: number, role: Principal['role'], caps: string[] = []): Principal => ({
  id,
  login: `u${id}`,
  role,
  via: 'app_password',
  can: (c) => role === 'administrator' || caps.includes(c),
});
const action = { approver_ids: [2, 3], approver_capabilities: [] as string[], acting_user_ids: [1, 2], self_approval: false };

describe('who may decide a workflow approval', () => {
  it('a named approver who is not one of the run’s people', () => {
    expect(approvalRights(person(3, 'editor'), action, false)).toMatchObject({ mayDecide: true, maySee: true });
  });

  it('not a named approver the run acts for, unless self_approval is on', () => {
    const rights = approvalRights(person(2, 'editor'), action, false);
    expect(rights).toMatchObject({ approver: true, ownRun: true, mayDecide: false, maySee: true });
    expect(refusalOf(rights)).toMatch(/self_approval is off/);
    expect(approvalRights(person(2, 'editor'), { ...action, self_approval: true }, false).mayDecide).toBe(true);
  });

  it('administrators are no exception: approvers of a capability, refused on their own runs, seeing all', () => {
    const byCapability = { ...action, approver_ids: [], approver_capabilities: ['svc_manage_workflows'] };
    expect(approvalRights(person(1, 'administrator'), byCapability, false)).toMatchObject({ approver: true, mayDecide: false, maySee: true });
    expect(approvalRights(person(9, 'administrator'), byCapability, false).mayDecide).toBe(true);
    expect(approvalRights(person(9, 'administrator'), action, false)).toMatchObject({ mayDecide: false, maySee: true });
    expect(approvalRights(person(4, 'editor', ['svc_manage_workflows']), byCapability, false).mayDecide).toBe(true);
  });

  it('others see nothing, unless they decided it', () => {
    expect(approvalRights(person(8, 'editor'), action, false)).toMatchObject({ mayDecide: false, maySee: false });
    expect(approvalRights(person(8, 'editor'), action, true).maySee).toBe(true);
  });
});
