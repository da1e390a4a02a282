import type { Principal } from '../auth/auth.service.js';

/**
 * Whose eyes a run's data is for. A run computes with the rights of the people it acts for (its
 * workflow's owner, the author of the version that runs, whoever started it by hand, a parent
 * run's people: `acting_user_ids`), so its data (the trigger payload, each node's input, output
 * and error message, the run's output and error message) may hold what only they may see: the
 * records an administrator's run read, say. Anyone else who may see the run (its workflow is
 * shared with them) sees what happened, not the data.
 *
 * A run that carries another's data (a reset replay continues the replayed run's state, a replay
 * from a node reuses its recorded outputs, a replay without a payload of its own reuses its
 * payload) was computed with that run's rights too: its data is for those who hold the rights of
 * both, and so on back along the replays.
 */

/** The people of one run whose data a run holds: its own, or a run it carries data from. */
export interface RunPeople {
  /** The workflow's owner. */
  ownerId: number;
  /** The people the run acted (or will act) for. */
  actingUserIds: readonly number[];
}

/**
 * The rule: `viewer` may see a run's data when they are an administrator, or the owner or one of
 * the people of every run in `runs` (the run itself and those it carries data from).
 */
export function holdsRunRights(viewer: Pick<Principal, 'id' | 'role'>, runs: readonly RunPeople[]): boolean {
  if (viewer.role === 'administrator') return true;
  return runs.length > 0 && runs.every((run) => run.ownerId === viewer.id || run.actingUserIds.includes(viewer.id));
}

/** The message a withheld error shows in place of its own (its code stays). */
export const WITHHELD_MESSAGE = 'Withheld: this run acted with rights you do not hold';

/** An error as someone without the run's rights sees it: its code and node, not its message nor what it carries (`data`). */
export function withheldError<E extends { code: string; message: string; data?: unknown } | null | undefined>(error: E): E {
  if (!error) return error;
  const { data: _data, ...rest } = error;
  return { ...rest, message: WITHHELD_MESSAGE } as E;
}
