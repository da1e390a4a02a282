import { describe, expect, it } from 'vitest';
import { holdsRunRights, WITHHELD_MESSAGE, withheldError } from './run-data-access.js';

const editor = (id: number) => ({ id, role: 'editor' as const });

describe("who sees a run's data", () => {
  const run = { ownerId: 1, actingUserIds: [1, 2] };

  it('the people the run acted for, its owner and administrators', () => {
    expect(holdsRunRights(editor(2), [run])).toBe(true);
    expect(holdsRunRights(editor(1), [{ ownerId: 1, actingUserIds: [2] }])).toBe(true);
    expect(holdsRunRights({ id: 9, role: 'administrator' }, [run])).toBe(true);
    expect(holdsRunRights(editor(3), [run])).toBe(false);
  });

  it('of a run carrying another run’s data, only those who hold the rights of both', () => {
    const replay = { ownerId: 1, actingUserIds: [1, 2, 3] };
    const replayed = { ownerId: 1, actingUserIds: [1] };
    expect(holdsRunRights(editor(3), [replay])).toBe(true);
    expect(holdsRunRights(editor(3), [replay, replayed])).toBe(false);
    expect(holdsRunRights(editor(1), [replay, replayed])).toBe(true);
  });

  it('nobody but administrators when the run is unknown', () => {
    expect(holdsRunRights(editor(1), [])).toBe(false);
  });

  it('others see an error’s code, not its message', () => {
    expect(withheldError({ code: 'vault_read', message: 'secret', node_id: 'n' })).toEqual({ code: 'vault_read', message: WITHHELD_MESSAGE, node_id: 'n' });
    expect(withheldError(null)).toBeNull();
  });
});
