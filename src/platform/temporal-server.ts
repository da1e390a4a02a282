import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { homedir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { isPortOpen, stopChild, tail, waitFor } from './child-process.js';
import type { Logger } from './logger.js';

/** The CLI tag the project builds: later tags carry a `replace` directive `go install` refuses. */
export const TEMPORAL_CLI_MODULE = 'github.com/temporalio/cli/cmd/temporal@v1.5.1';

const isExecutable = (path: string) => {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

/** Per-user cache, shared by every clone on the machine so the minutes-long build happens once. */
export function userCacheDir(): string {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'workflow-svc', 'temporal');
}

/**
 * Finds the `temporal` binary: TEMPORAL_CLI, then PATH, then the project's `.cache/temporal/`,
 * then the per-user cache; failing those, builds it into the per-user cache with Go.
 */
export async function provisionTemporalCli(logger: Logger, explicit?: string): Promise<string> {
  if (explicit) {
    if (!isExecutable(explicit)) throw new Error(`TEMPORAL_CLI: ${explicit} is not an executable file`);
    return explicit;
  }
  const candidates = [
    ...(process.env.PATH ?? '')
      .split(delimiter)
      .filter(Boolean)
      .map((dir) => join(dir, 'temporal')),
    resolve('.cache', 'temporal', 'temporal'),
    join(userCacheDir(), 'temporal'),
  ];
  const found = candidates.find(isExecutable);
  if (found) return found;
  const go = (process.env.PATH ?? '')
    .split(delimiter)
    .map((d) => join(d, 'go'))
    .find(isExecutable);
  if (!go) {
    throw new Error(
      'the Temporal CLI was not found (TEMPORAL_CLI, PATH, .cache/temporal/ or ' +
        userCacheDir() +
        ') and Go is not installed to build it; install Go, set TEMPORAL_CLI, or set TEMPORAL_ADDRESS to use an existing server',
    );
  }
  const target = userCacheDir();
  await mkdir(target, { recursive: true });
  logger.info({ target }, `building the Temporal CLI (go install ${TEMPORAL_CLI_MODULE}); the first build takes a few minutes`);
  const started = Date.now();
  const progress = setInterval(() => {
    logger.info(`still building the Temporal CLI (${Math.round((Date.now() - started) / 1000)}s)`);
  }, 15_000);
  try {
    await new Promise<void>((ok, fail) => {
      const output = tail();
      const child = spawn(go, ['install', TEMPORAL_CLI_MODULE], {
        env: { ...process.env, GOBIN: target },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout!.on('data', (c) => output.push(c));
      child.stderr!.on('data', (c) => output.push(c));
      child.once('error', fail);
      child.once('exit', (code) => (code === 0 ? ok() : fail(new Error(`go install failed (${code}): ${output.text}`))));
    });
  } finally {
    clearInterval(progress);
  }
  const built = join(target, 'temporal');
  if (!existsSync(built)) throw new Error(`go install finished but ${built} is missing`);
  logger.info({ path: built }, 'Temporal CLI built');
  return built;
}

/**
 * Dynamic config that takes the fixed wait out of every sequential step (docs/performance.md):
 * - the transfer queue (activity and workflow task dispatch) reads at most 20 times a second per
 *   shard by default, so each hop of a busy run waited up to 50 ms for the next read;
 * - eager activity execution hands a run's first activity task back in the answer to the workflow
 *   task that scheduled it, skipping one dispatch;
 * - a new timer must lie 1 s beyond the timer queue's read point by default, so a 1 ms `delay`
 *   fired after a second.
 * The same values are in deploy/temporal-dynamicconfig.yaml for a cluster.
 */
export const LOW_LATENCY_DYNAMIC_CONFIG: Readonly<Record<string, string | number | boolean>> = {
  'history.transferProcessorMaxPollRPS': 1000,
  'system.enableActivityEagerExecution': true,
  'history.timerProcessorMaxTimeShift': '10ms',
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
    return this.address;
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    await stopChild(child, 'SIGTERM', 15_000);
  }
}
