/**
 * The baseline as a process of its own: the hand-written workflows of bench/baseline.workflows.ts
 * on a worker with the service's worker options, and the client that starts them (eagerly, on the
 * worker's connection, no payload codec, nothing mirrored to PostgreSQL), in one process, so that
 * the benchmark reads its CPU apart from ours, Temporal's and PostgreSQL's.
 *
 * Started by bench/harness.ts with the Temporal address and a task queue in the environment
 * (TEMPORAL_ADDRESS, BARE_TASK_QUEUE). It reads one JSON command per line on stdin and answers
 * each with one JSON line on stdout:
 *   {"id":1,"type":"bareOne","args":[],"total":200,"concurrency":50}
 *   -> {"id":1,"ok":true,"elapsedMs":3712.5,"latencies":[...],"workflowIds":[...]}
 * Every run is `client.workflow.execute()`: started and awaited to its result. It prints
 * {"ready":true} once the worker polls.
 *
 * `"serve": true` instead opens an HTTP server on loopback whose every POST runs the workflow
 * (`client.workflow.execute()`, eagerly) and answers its result as JSON, the run's workflow id in
 * its X-Workflow-Id header: the bare SDK behind a webhook. The answer to the command carries the
 * server's `url`; the server stays up until the process ends.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { WORKER_TUNING } from '../src/temporal/worker.js';
import { load } from './lib.js';

export interface BareCommand {
  id: number;
  /** A workflow of bench/baseline.workflows.ts. */
  type: string;
  args: unknown[];
  total: number;
  concurrency: number;
  /** Serve the workflow over HTTP instead of running it `total` times. */
  serve?: boolean;
}

export interface BareAnswer {
  id: number;
  ok: boolean;
  error?: string;
  elapsedMs: number;
  /** Start -> result of each run, ms. */
  latencies: number[];
  workflowIds: string[];
  /** Where a served workflow answers (`serve`). */
  url?: string;
}

const silent = { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} };

async function main() {
  const address = process.env.TEMPORAL_ADDRESS;
  const taskQueue = process.env.BARE_TASK_QUEUE ?? 'bench-baseline';
  if (!address) throw new Error('TEMPORAL_ADDRESS is required');
  // As the service's worker logs: warnings and errors only, here to stderr (stdout is the protocol).
  Runtime.install({ logger: new DefaultLogger('WARN', (entry) => process.stderr.write(`${entry.level} ${entry.message}\n`)) });
  const workflowBundle = await bundleWorkflowCode({
    workflowsPath: fileURLToPath(new URL('./baseline.workflows.ts', import.meta.url)),
    logger: silent,
  });
  const connection = await NativeConnection.connect({ address });
  const worker = await Worker.create({
    connection,
    taskQueue,
    workflowBundle,
    activities: {
      noop: async () => null,
      get: async (url: string) => (await fetch(url)).status,
      getJson: async (url: string) => (await fetch(url)).json(),
      transform: async (item: number) => ({ twice: item * 2, at: item }),
    },
    ...WORKER_TUNING,
  });
  const running = worker.run();
  const client = new Client({ connection });
  const answer = (a: BareAnswer | { ready: true }) => process.stdout.write(JSON.stringify(a) + '\n');

  const lines = createInterface({ input: process.stdin });
  // One command at a time: the benchmark measures each on its own.
  let queue = Promise.resolve();
  lines.on('line', (line) => {
    if (!line.trim()) return;
    const command = JSON.parse(line) as BareCommand;
    if (command.serve) {
      void serve(command).then(
        (url) => answer({ id: command.id, ok: true, elapsedMs: 0, latencies: [], workflowIds: [], url }),
        (err: unknown) => answer({ id: command.id, ok: false, error: String(err), elapsedMs: 0, latencies: [], workflowIds: [] }),
      );
      return;
    }
    queue = queue.then(async () => {
      const workflowIds: string[] = [];
      const started = performance.now();
      try {
        const result = await load(command.concurrency, command.total, async () => {
          const workflowId = randomUUID();
          workflowIds.push(workflowId);
          await client.workflow.execute(command.type, { taskQueue, workflowId, args: command.args, requestEagerStart: true });
        });
        answer({ id: command.id, ok: true, elapsedMs: performance.now() - started, latencies: result.latencies, workflowIds });
      } catch (err) {
        answer({ id: command.id, ok: false, error: String(err), elapsedMs: performance.now() - started, latencies: [], workflowIds });
      }
    });
  });
  /** An HTTP server whose every POST runs the command's workflow and answers its result. */
  const serve = (command: BareCommand) =>
    new Promise<string>((resolve) => {
      const server = createServer((req, res) => {
        req.resume();
        req.once('end', () => {
          const workflowId = randomUUID();
          client.workflow.execute(command.type, { taskQueue, workflowId, args: command.args, requestEagerStart: true }).then(
            (result) => res.writeHead(200, { 'content-type': 'application/json', 'x-workflow-id': workflowId }).end(JSON.stringify(result)),
            (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err)),
          );
        });
      });
      server.keepAliveTimeout = 65_000;
      server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as { port: number }).port}/`));
    });
  lines.once('close', () => {
    void queue.then(async () => {
      worker.shutdown();
      await running;
      await connection.close();
      process.exit(0);
    });
  });
  answer({ ready: true });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
