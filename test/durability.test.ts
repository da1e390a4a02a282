import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorkerProcess, killProcess } from './helpers/worker-process.js';
import { startTestApp, type TestApp } from './helpers/app.js';
import { closedHistory } from './helpers/history.js';
import { eventually, startHttpTarget, type HttpTarget } from './helpers/http-target.js';
import { startTcpProxy } from './helpers/tcp-proxy.js';

let app: TestApp;
let target: HttpTarget;
let connectionId: number;
const workers: ChildProcess[] = [];
const W = '/api/workflow/v1/workflows';

/** A worker in its own process, as `svc worker` runs in production. */
function startWorker(env: Record<string, string> = {}): ChildProcess {
  const child = startWorkerProcess(app, env);
  workers.push(child);
  return child;
}

const kill = killProcess;

beforeAll(async () => {
  app = await startTestApp({ worker: false });
  target = await startHttpTarget((req) => (req.url.startsWith('/slow') ? { delayMs: 3000 } : undefined));
  connectionId = (await app.admin.post('/api/workflow/v1/connections', { type: 'http_bearer', label: 't', cred: 'x', extra: { base_url: target.url } })).body
    .data.id;
});
afterAll(async () => {
  await Promise.all(workers.map(kill));
  await app?.close();
  await target?.close();
});

const call = (id: string, path: string) => ({ id, type: 'http_request', connection_id: connectionId, config: { method: 'GET', path } });

async function finished(executionId: number, client = app.admin, timeoutMs = 60_000) {
  return eventually(
    async () => {
      const v = (await client.get(`/api/workflow/v1/executions/${executionId}`)).body.data;
      return v.status !== 'running' ? v : undefined;
    },
    timeoutMs,
    `execution ${executionId} to finish`,
  );
}

// The last test closes the shared API's listener (an API restart), so the file's tests run in
// this order even when shuffled.
describe('durability, in order', { shuffle: false }, () => {
  describe('a run the API never got to start', () => {
    it('is closed as start_failed a minute later instead of staying running forever', async () => {
      const workflow = (
        await app.admin.post(W, { title: 'Never started', trigger: { type: 'manual' }, nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }] })
      ).body.data;
      // As the API leaves it when it dies between writing the record and starting the run.
      const prefix = app.stack.services.temporal.executionWorkflowPrefix;
      const insert = (age: string) =>
        app.sql<{ id: string }>(
          `insert into executions (id, workflow_id, workflow_version, status, trigger, trigger_payload, temporal_workflow_id, started_at)
         select n.id, $1, 1, 'running', 'manual', 'null', $2 || n.id, now() - $3::interval from (select nextval('executions_id_seq') as id) n returning id`,
          [workflow.id, prefix, age],
        );
      const [old] = await insert('2 minutes');
      const [fresh] = await insert('1 second');
      // The first call's attempt, as the API counts it while Temporal answers the start: no call was made.
      await app.sql(
        `insert into execution_nodes (execution_id, node_id, node_type, status, started_at, attempts) values ($1, 'a', 'transform', 'running', now(), 1)`,
        [old!.id],
      );
      const view = (await app.admin.get(`/api/workflow/v1/executions/${old!.id}`)).body.data;
      expect(view).toMatchObject({ status: 'failed', error: { code: 'start_failed' }, timeline: [] });
      expect(view.finished_at).not.toBeNull();
      // A record just written may still be claimed by its run: it is left alone.
      expect((await app.admin.get(`/api/workflow/v1/executions/${fresh!.id}`)).body.data.status).toBe('running');
    });
  });

  describe('a worker killed in the middle of a run', () => {
    it('inside a slow node: the run finishes on a new worker, completed nodes do not run again, the timeline is whole', async () => {
      const workflow = (
        await app.admin.post(W, {
          title: 'Slow middle',
          trigger: { type: 'manual' },
          nodes: [call('first', '/k1-first'), call('slow', '/slow-k1'), call('last', '/k1-last')],
          edges: [
            { from: 'first', to: 'slow' },
            { from: 'slow', to: 'last' },
          ],
        })
      ).body.data;
      const worker = startWorker();
      const run = (await app.admin.post(`${W}/${workflow.id}/run`, { payload: {} })).body.data.execution_id;
      await eventually(async () => target.count('/slow-k1') > 0, 60_000, 'the slow node to start');
      await kill(worker);
      startWorker();
      const done = await finished(run);
      expect(done.status).toBe('success');
      expect(target.count('/k1-first')).toBe(1);
      expect(target.count('/k1-last')).toBe(1);
      expect(target.count('/slow-k1')).toBeGreaterThanOrEqual(2); // it had not completed, so it ran again
      expect(done.timeline.map((t: { node_id: string; status: string }) => [t.node_id, t.status])).toEqual([
        ['first', 'success'],
        ['slow', 'success'],
        ['last', 'success'],
      ]);
      expect(done.timeline[1].attempts).toBeGreaterThanOrEqual(2);
    }, 120_000);

    it('inside a short call run as a local activity: the calls before it do not run again, and the timeline counts both of its attempts', async () => {
      // Three short calls (the default timeout): `a` and `c` run as local activities in their
      // workflow tasks; `b` follows `a` in a's task, so it runs as a regular activity, whose
      // scheduling records a's result before b is called.
      const workflow = (
        await app.admin.post(W, {
          title: 'Slow local call',
          trigger: { type: 'manual' },
          nodes: [call('a', '/k4-a'), call('b', '/k4-b'), call('c', '/slow-k4-c')],
          edges: [
            { from: 'a', to: 'b' },
            { from: 'b', to: 'c' },
          ],
        })
      ).body.data;
      const worker = workers.at(-1)!;
      const run = (await app.admin.post(`${W}/${workflow.id}/run`, { payload: {} })).body.data.execution_id;
      await eventually(async () => target.count('/slow-k4-c') > 0, 60_000, 'the slow call to start');
      // The call is counted and shown running before it is made.
      const [entry] = await app.sql<{ status: string; attempts: number }>(
        `select status, attempts from execution_nodes where execution_id = $1 and node_id = 'c'`,
        [run],
      );
      expect(entry).toEqual({ status: 'running', attempts: 1 });
      await kill(worker);
      startWorker();
      const done = await finished(run);
      expect(done.status).toBe('success');
      expect(target.count('/k4-a')).toBe(1);
      expect(target.count('/k4-b')).toBe(1);
      expect(target.count('/slow-k4-c')).toBeGreaterThanOrEqual(2);
      const c = done.timeline.find((t: { node_id: string }) => t.node_id === 'c');
      expect(c).toMatchObject({ status: 'success' });
      expect(c.attempts).toBe(target.count('/slow-k4-c'));
      // How each ran: only b was a regular activity (its scheduled event names it).
      const history = await closedHistory(app.stack.services.temporal.client.workflow.getHandle(done.temporal.workflow_id));
      const scheduled = (history.events ?? []).map((e) => e.activityTaskScheduledEventAttributes?.activityId).filter(Boolean);
      expect(scheduled).toEqual(['node:b']);
    }, 120_000);

    it('between two nodes, during a delay: the timer survives and nothing runs twice', async () => {
      const workflow = (
        await app.admin.post(W, {
          title: 'Delay between',
          trigger: { type: 'manual' },
          nodes: [call('before', '/k2-before'), { id: 'pause', type: 'delay', config: { duration_ms: 4000 } }, call('after', '/k2-after')],
          edges: [
            { from: 'before', to: 'pause' },
            { from: 'pause', to: 'after' },
          ],
        })
      ).body.data;
      const worker = workers.at(-1)!;
      const run = (await app.admin.post(`${W}/${workflow.id}/run`, { payload: {} })).body.data.execution_id;
      // Killed once the delay has begun: the first node is done and the timer is Temporal's. The
      // delay's entry shows it running a moment before the workflow task that recorded the first
      // node and started the timer completes, so the history is what tells.
      const handle = app.stack.services.temporal.client.workflow.getHandle(app.stack.services.temporal.executionWorkflowId(run));
      await eventually(
        async () => ((await handle.fetchHistory()).events ?? []).some((e) => e.timerStartedEventAttributes),
        30_000,
        'the delay’s timer to start',
      );
      expect((await app.sql(`select status from execution_nodes where execution_id = $1 and node_id = 'pause'`, [run]))[0]).toEqual({ status: 'running' });
      await kill(worker);
      startWorker();
      const done = await finished(run);
      expect(done.status).toBe('success');
      expect(target.count('/k2-before')).toBe(1);
      expect(target.count('/k2-after')).toBe(1);
      expect(done.timeline.map((t: { status: string }) => t.status)).toEqual(['success', 'success', 'success']);
    }, 120_000);
  });

  describe('a worker killed in the middle of a loop', () => {
    it('loses no item and runs no completed item again; the items in flight run again on the new worker', async () => {
      const paths = Array.from({ length: 40 }, (_, i) => (i >= 20 && i < 24 ? `/slow-loop-${i}` : `/loop-${i}`));
      const workflow = (
        await app.admin.post(W, {
          title: 'Loop across a worker kill',
          trigger: { type: 'manual' },
          nodes: [
            {
              id: 'each',
              type: 'for_each',
              config: { items: '{{ trigger.paths }}', concurrency: 4, body: { nodes: [call('get', '{{ item }}')] } },
            },
          ],
        })
      ).body.data;
      const worker = startWorker();
      const run = (await app.admin.post(`${W}/${workflow.id}/run`, { payload: { paths } })).body.data.execution_id;
      // Killed once items 0 to 19 are recorded and 20 to 23 (slow) are in flight.
      await eventually(
        async () => {
          const [row] = await app.sql<{ n: number }>(`select count(*)::int as n from execution_items where execution_id = $1 and status = 'success'`, [run]);
          return row!.n >= 20 && paths.slice(20, 24).every((p) => target.count(p) > 0);
        },
        60_000,
        'twenty items recorded and four in flight',
      );
      await kill(worker);
      startWorker();
      const done = await finished(run, app.admin, 120_000);
      expect(done.status).toBe('success');
      expect(done.timeline[0].output.results.map((r: { body: { path: string } }) => r.body.path)).toEqual(paths);
      // Completed items never ran again; the ones in flight did, as a node in flight does.
      for (const [i, path] of paths.entries()) {
        if (i >= 20 && i < 24) expect(target.count(path), path).toBeGreaterThanOrEqual(1);
        else expect(target.count(path), path).toBe(1);
      }
      const listed = (await app.admin.get(`/api/workflow/v1/executions/${run}/nodes/each/items?per_page=50`)).body.data;
      expect(listed.items.map((i: { status: string }) => i.status)).toEqual(paths.map(() => 'success'));
    }, 180_000);
  });

  describe('a worker started while PostgreSQL is unreachable', () => {
    it('waits for it instead of exiting, then runs what it is given', async () => {
      // A stand-in for PostgreSQL's address: it drops every connection (a server restarting) until
      // opened, then forwards to the real server.
      const real = new URL(app.databaseUrl);
      const proxy = await startTcpProxy({ host: real.hostname, port: Number(real.port) }, 'drop');
      try {
        const url = new URL(app.databaseUrl);
        url.hostname = '127.0.0.1';
        url.port = String(proxy.port);
        const child = startWorker({ DATABASE_URL: url.toString() });
        let exit: number | null | undefined;
        child.once('exit', (code) => (exit = code));
        // It met a dropped connection, and tried again rather than exit.
        await eventually(async () => (proxy.dropped >= 3 || exit !== undefined ? true : undefined), 60_000, 'the worker to try PostgreSQL three times');
        expect(exit).toBeUndefined();
        proxy.set('pass');
        const workflow = (
          await app.admin.post(W, {
            title: 'After the database came up',
            trigger: { type: 'manual' },
            nodes: [{ id: 'a', type: 'transform', config: { value: 7 } }],
          })
        ).body.data;
        const run = (await app.admin.post(`${W}/${workflow.id}/run`, {})).body.data.execution_id;
        expect(await finished(run, app.admin, 120_000)).toMatchObject({ status: 'success' });
        expect(exit).toBeUndefined();
        await kill(child);
      } finally {
        await proxy.close();
      }
    }, 180_000);
  });

  describe('the API restarted', () => {
    it('loses nothing: a run started before the restart is visible and finishes after it', async () => {
      const workflow = (
        await app.admin.post(W, {
          title: 'Across an API restart',
          trigger: { type: 'manual' },
          nodes: [{ id: 'pause', type: 'delay', config: { duration_ms: 2000 } }, call('done', '/k3-done')],
          edges: [{ from: 'pause', to: 'done' }],
        })
      ).body.data;
      const run = (await app.admin.post(`${W}/${workflow.id}/run`, { payload: { keep: true } })).body.data.execution_id;
      const env = {
        SVC_ENCRYPTION_KEY: app.config.SVC_ENCRYPTION_KEY!,
        TEMPORAL_TASK_QUEUE: app.config.TEMPORAL_TASK_QUEUE,
        SVC_INSTANCE_ID: app.config.SVC_INSTANCE_ID,
      };
      const second = await startTestApp({ databaseUrl: app.databaseUrl, env });
      try {
        await app.stack.server!.close();
        const done = await finished(run, second.admin);
        expect(done).toMatchObject({ status: 'success', trigger_payload: { keep: true } });
        expect(target.count('/k3-done')).toBe(1);
      } finally {
        await second.close();
      }
    }, 120_000);
  });
});
