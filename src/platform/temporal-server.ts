import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdir } from 'node:fs/promises';
import { resolve } from 'node:path';
import { isPortOpen, stopChild, tail, waitFor } from './child-process.js';
import type { Logger } from './logger.js';

// CLI provisioning lives in temporal-cli.ts; these names stay importable from here.
export { TEMPORAL_CLI_MODULE, provisionTemporalCli, userCacheDir } from './temporal-cli.js';

/**
 * Dynamic config that takes the fixed wait out of every sequential step (docs/performance.md):
 * - the transfer queue (activity and workflow task dispatch) reads at most 20 times a second per
 *   shard by default, so each hop of a busy run waited up to 50 ms for the next read;
 * - eager activity execution hands a run's first activity task back in the answer to the workflow
 *   task that scheduled it, skipping one dispatch;
 * - a new timer must lie 1 s beyond the timer queue's read point by default, so a 1 ms `delay`
 *   fired after a second;
 * - a task queue has four partitions by default: under a burst a run's first workflow task that
 *   did not come back with its start (no slot free for it at that moment) could land on a
 *   partition no poller was waiting on and wait there for seconds (webhooks at concurrency 50:
 *   p99 3.9 to 5.4 s with four, 2.9 to 3.2 s with one, in alternate runs the same hour,
 *   docs/performance.md). One server has no matching hosts to spread them over.
 * The same values are in deploy/temporal-dynamicconfig.yaml for a cluster.
 */
export const LOW_LATENCY_DYNAMIC_CONFIG: Readonly<Record<string, string | number | boolean>> = {
  'history.transferProcessorMaxPollRPS': 1000,
  'system.enableActivityEagerExecution': true,
  'history.timerProcessorMaxTimeShift': '10ms',
  'matching.numTaskqueueReadPartitions': 1,
  'matching.numTaskqueueWritePartitions': 1,
};

export interface DevServerOptions {
  cli: string;
  port: number;
  uiPort: number;
  /** SQLite file; without it the server keeps everything in memory. */
  dbFile?: string;
  headless?: boolean;
  codecEndpoint?: string;
  /** Dynamic config values (`--dynamic-config-value`); LOW_LATENCY_DYNAMIC_CONFIG unless given. */
  dynamicConfig?: Readonly<Record<string, string | number | boolean>>;
  logger: Logger;
}

/** Makes a SQLite database and its journal files, those that exist, readable by their owner only. */
async function privateDatabase(path: string): Promise<void> {
  for (const file of [path, `${path}-wal`, `${path}-shm`, `${path}-journal`]) await chmod(file, 0o600).catch(() => undefined);
}

/** Runs `temporal server start-dev` as a child process bound to loopback. */
export class TemporalDevServer {
  private child?: ChildProcess;

  constructor(private readonly options: DevServerOptions) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get address(): string {
    return `127.0.0.1:${this.options.port}`;
  }

  async start(): Promise<string> {
    const { cli, port, uiPort, dbFile, headless, codecEndpoint, logger } = this.options;
    if (await isPortOpen(port)) {
      throw new Error(`Temporal dev server: port ${port} is already in use (set TEMPORAL_PORT or TEMPORAL_ADDRESS)`);
    }
    const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(port), '--log-level', 'error'];
    if (dbFile) {
      await mkdir(resolve(dbFile, '..'), { recursive: true });
      // SQLite gives its journal files the database file's mode: an existing database is made
      // 0600 before the server opens it, a new one as soon as the server is up.
      await privateDatabase(dbFile);
      // WAL journal, still synced at every commit: fewer writes per commit than the default
      // rollback journal, the same durability (docs/performance.md).
      args.push('--db-filename', dbFile, '--sqlite-pragma', 'journal_mode=wal', '--sqlite-pragma', 'synchronous=full');
    }
    if (headless) args.push('--headless');
    else args.push('--ui-port', String(uiPort));
    if (codecEndpoint) args.push('--ui-codec-endpoint', codecEndpoint);
    // Values are JSON: strings quoted, numbers and booleans as they are.
    for (const [key, value] of Object.entries(this.options.dynamicConfig ?? LOW_LATENCY_DYNAMIC_CONFIG))
      args.push('--dynamic-config-value', `${key}=${JSON.stringify(value)}`);
    const output = tail();
    const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TEMPORAL_ADDRESS: '' } });
    this.child = child;
    child.stdout!.on('data', (c) => output.push(c));
    child.stderr!.on('data', (c) => output.push(c));
    let exited: string | undefined;
    child.once('exit', (code, signal) => {
      exited = `exited (${signal ?? code})`;
      if (this.child === child) logger.warn({ code, signal }, 'Temporal dev server exited');
    });
    await waitFor(
      'Temporal dev server',
      () => isPortOpen(port),
      120_000,
      () => (exited ? `${exited}: ${output.text}` : undefined),
    );
    if (dbFile) await privateDatabase(dbFile);
    return this.address;
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    await stopChild(child, 'SIGTERM', 15_000);
  }
}
