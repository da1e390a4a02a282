import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultPayloadConverter } from '@temporalio/common';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { describe, expect, inject, it } from 'vitest';
import { readNodeEvents, nodesFinishedBefore } from '../src/executions/reset-point.js';
import type { TemporalHandle } from '../src/temporal/connection.js';

/**
 * Runs in flight survive an upgrade: every recorded history (test/histories/<set>/, one set per
 * recording, see record.histories.ts) is replayed by today's workflow code. A change to the
 * commands a workflow issues that is not guarded by patched() makes its replay nondeterministic,
 * and this test fails.
 */
// The replay workers' state changes are not news here; their failures are (collected below).
Runtime.install({ logger: new DefaultLogger('WARN') });

const root = fileURLToPath(new URL('./histories/', import.meta.url));
const sets = readdirSync(root, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name)
  .sort();

describe('recorded histories replay on the current workflow code', () => {
  it('has histories of every workflow type', () => {
    const files = sets.flatMap((set) => Object.keys(JSON.parse(readFileSync(join(root, set, 'workflow-ids.json'), 'utf8'))));
    for (const type of ['runGraph', 'agentSession', 'deliverLicenseWebhook'])
      expect(
        files.some((f) => f.includes(`.${type}.json`)),
        type,
      ).toBe(true);
  });

  for (const set of sets) {
    it(`replays set ${set}`, async () => {
      const workflowIds = JSON.parse(readFileSync(join(root, set, 'workflow-ids.json'), 'utf8')) as Record<string, string>;
      const files = Object.keys(workflowIds).sort();
      const histories = files.map((file) => ({ workflowId: workflowIds[file]!, history: JSON.parse(readFileSync(join(root, set, file), 'utf8')) }));
      const failures: string[] = [];
      let replayed = 0;
      for await (const result of Worker.runReplayHistories({ workflowBundle: { codePath: inject('workflowBundle') } }, histories)) {
        replayed++;
        if (result.error) failures.push(`${result.workflowId}: ${result.error.name}: ${result.error.message}`);
      }
      expect(replayed).toBe(files.length);
      expect(failures).toEqual([]);
    });
  }
});

describe('reset points read from recorded histories', () => {
  /** Serves one recorded (decrypted) history as Temporal would. */
  const recorded = (set: string, file: string) => {
    const { events } = historyFromJSON(JSON.parse(readFileSync(join(root, set, file), 'utf8')));
    return {
      namespace: 'default',
      client: { workflowService: { getWorkflowExecutionHistory: async () => ({ history: { events } }) } },
      decode: async (payload: never) => defaultPayloadConverter.fromPayload(payload),
    } as unknown as TemporalHandle;
  };

  it('a node started in a task the worker completed early (a task heartbeat while a local activity ran) resets to that task', async () => {
    const events = await readNodeEvents(recorded('2026-11-23-last-task', 'graph-last-task-heartbeat.01.runGraph.json'), 'w', 'r');
    // The heartbeat completed the task at event 12 with b's start and end; finishExecution's
    // result came in the next task.
    expect(events.started.get('b')).toBe(12);
    expect(events.started.get('check')).toBe(12);
    expect(nodesFinishedBefore(events, 12, 'b')).toEqual(['hold']);
  });

  it('while the last task is still open, the history holds no start of the nodes started in it', async () => {
    const events = await readNodeEvents(recorded('2026-11-23-last-task', 'graph-last-task-open.01.runGraph.json'), 'w', 'r');
    expect([...events.started.keys()]).toEqual(['hold']);
  });
});
