import { Announcements, type ListeningHub } from '../platform/announcements.js';
import type { Logger } from '../platform/logger.js';

/**
 * The channel a run announces on when one of its own steps has ended its record: its last node
 * (in one statement with its own timeline entry) or its finishing step, with the statement that
 * ends it. The payload is the ended record as JSON, `{"id", "status", "output"}`, when it fits
 * in NOTIFY_PAYLOAD_BYTES, else the execution id alone.
 */
export const RUN_CLOSED_CHANNEL = 'svc_run_closed';

/** What an announcement said of the ended record: its status and output, unless they did not fit. */
export interface ClosedRecord {
  status: string;
  output: unknown;
}

/** An announcement's execution id and, when it carried them, the record's status and output; undefined when unreadable. */
export function readAnnouncement(payload: string): { executionId: number; record?: ClosedRecord } | undefined {
  if (!payload.startsWith('{')) {
    const executionId = Number(payload);
    return /^\d+$/.test(payload) && Number.isSafeInteger(executionId) ? { executionId } : undefined;
  }
  try {
    const { id, status, output } = JSON.parse(payload) as { id: number; status: string; output: unknown };
    return Number.isSafeInteger(id) && typeof status === 'string' ? { executionId: id, record: { status, output: output ?? null } } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Hears, on the API process's LISTEN connection (the one agent turn streams use), that a run's
 * record was ended by the run itself, so an API waiting for that run's result can answer a
 * success from the record without asking Temporal at all, and ask it for any other outcome as
 * soon as the record says so. Keyed by execution id; what it resolves with is the record when the announcement
 * carried it.
 */
export function runClosedAnnouncements(hub: ListeningHub, logger: Logger): Announcements<ClosedRecord | undefined> {
  return new Announcements(
    hub,
    RUN_CLOSED_CHANNEL,
    (payload) => {
      const heard = readAnnouncement(payload);
      return heard && { key: String(heard.executionId), value: heard.record };
    },
    logger,
  );
}
