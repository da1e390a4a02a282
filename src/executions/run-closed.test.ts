import { describe, expect, it } from 'vitest';
import { readAnnouncement } from './run-closed.js';

describe('a run-closed announcement', () => {
  it('carries the ended record, or its execution id alone', () => {
    expect(readAnnouncement('{"id": 12, "status": "success", "output": {"body": {"ok": true}}}')).toEqual({
      executionId: 12,
      record: { status: 'success', output: { body: { ok: true } } },
    });
    expect(readAnnouncement('{"id": 3, "status": "partial", "output": null}')).toEqual({ executionId: 3, record: { status: 'partial', output: null } });
    expect(readAnnouncement('41')).toEqual({ executionId: 41 });
  });

  it('is ignored when it cannot be read', () => {
    for (const payload of ['', 'abc', '{', '{"status": "success"}', '{"id": "7", "status": "success"}', '{"id": 7}', '1e400'])
      expect(readAnnouncement(payload), payload).toBeUndefined();
  });
});
