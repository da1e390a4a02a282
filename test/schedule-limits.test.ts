import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

/**
 * Runs started by schedules are bounded per user (the owner of their workflows, all schedules
 * together): a schedule firing every second with `allow_all` and runs that last a minute keeps
 * SVC_SCHEDULE_MAX_RUNNING_PER_USER of them running, and each tick beyond ends at once.
 */

let app: TestApp;
let owner: TestUser;
let other: TestUser;
const W = '/api/workflow/v1/workflows';
const E = '/api/workflow/v1/executions';
const LIMIT = 2;

beforeAll(async () => {
  app = await startTestApp({ worker: true, env: { SVC_SCHEDULE_MAX_RUNNING_PER_USER: String(LIMIT) } });
  owner = await app.createUser('editor');
  other = await app.createUser('editor');
});
afterAll(async () => app?.close());

/** A workflow whose runs wait a minute, started every second whatever is still running. */
async function everySecond(client: TestUser['client'], title: string): Promise<number> {
  const res = await client.post(W, {
    title,
    status: 'active',
    trigger: { type: 'schedule', config: { cron: '@every 1s', overlap: 'allow_all' } },
    nodes: [{ id: 'wait', type: 'delay', config: { duration_ms: 60_000 } }],
  });
  expect(res.status, res.text).toBe(201);
  return res.body.data.id as number;
}

async function runs(client: TestUser['client'], workflowId: number, status: string) {
  const res = await client.get(`${E}?workflow_id=${workflowId}&status=${status}&per_page=100`);
  expect(res.status, res.text).toBe(200);
  return res.body.data.items as { id: number; status: string }[];
}

/** Pauses the schedules and ends the runs still waiting, so nothing outlives the test. */
async function stop(client: TestUser['client'], ids: number[]) {
  for (const id of ids) await client.post(`${W}/${id}/deactivate`);
  for (const id of ids) {
    for (const run of await runs(client, id, 'running')) {
      const view = (await client.get(`${E}/${run.id}`)).body.data;
      await app.stack.services.temporal.client.workflow
        .getHandle(view.temporal.workflow_id)
        .terminate('test over')
        .catch(() => undefined);
    }
  }
}

describe('runs started by schedules', () => {
  it('keep at most SVC_SCHEDULE_MAX_RUNNING_PER_USER running per owner, over all their schedules; each tick beyond ends at once', async () => {
    const first = await everySecond(owner.client, 'Every second, a minute long');
    const second = await everySecond(owner.client, 'Every second too');
    const elsewhere = await everySecond(other.client, "Another user's schedule");
    try {
      let mostRunning = 0;
      const refused = await eventually(
        async () => {
          const running = (await runs(owner.client, first, 'running')).length + (await runs(owner.client, second, 'running')).length;
          mostRunning = Math.max(mostRunning, running);
          const failed = [...(await runs(owner.client, first, 'failed')), ...(await runs(owner.client, second, 'failed'))];
          return failed.length >= 3 ? failed : undefined;
        },
        90_000,
        'three refused scheduled runs',
      );
      expect(mostRunning).toBeLessThanOrEqual(LIMIT);
      const view = (await owner.client.get(`${E}/${refused[0]!.id}`)).body.data;
      expect(view).toMatchObject({ status: 'failed', trigger: 'schedule', error: { code: 'schedule_run_limit' } });
      expect(view.error.message).toMatch(/SVC_SCHEDULE_MAX_RUNNING_PER_USER/);
      expect(view.finished_at).toEqual(expect.any(String));
      // The refused run ended in Temporal too: the record and Temporal agree.
      await eventually(async () => {
        const described = await app.stack.services.temporal.client.workflow.getHandle(view.temporal.workflow_id, view.temporal.run_id).describe();
        return described.status.name === 'FAILED';
      });
      // Another user's schedule has its own allowance.
      const theirs = await eventually(async () => ((await runs(other.client, elsewhere, 'running')).length >= LIMIT ? true : undefined), 60_000, 'their runs');
      expect(theirs).toBe(true);
      expect((await runs(owner.client, first, 'running')).length + (await runs(owner.client, second, 'running')).length).toBeLessThanOrEqual(LIMIT);
    } finally {
      await stop(owner.client, [first, second]);
      await stop(other.client, [elsewhere]);
    }
  });
});
