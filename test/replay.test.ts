import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { describe, expect, inject, it } from 'vitest';

/**
 * Runs in flight survive an upgrade: every recorded history (test/histories/<set>/, one set per
 * recording, see record.histories.ts) is replayed by today's workflow code. A change to the
 * commands a workflow issues that is not guarded by patched() makes its replay nondeterministic,
 * and this test fails. What a reset point reads from these histories is tested beside the code
 * (src/executions/reset-point.test.ts).
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
    for (const type of ['runGraph', 'agentSession', 'deliverLicenseWebhook', 'forEachItems'])
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
