import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { stopChild, tail, waitFor } from '../platform/child-process.js';
import type { Logger } from '../platform/logger.js';

export interface ProcessSpec {
  /** Name in logs and messages (`api-1`, `temporal-server`). */
  name: string;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  cwd: string;
  /** Resolves true once the process serves (polled every 200 ms while it runs). */
  ready: (process: ManagedProcess) => Promise<boolean>;
  readyTimeoutMs: number;
  /** Appends stdout and stderr here. */
  logFile?: string;
  /** Each stdout line, instead of the log file (stderr still goes to the file and the tail). */
  onStdoutLine?: (line: string) => void;
  stopSignal?: NodeJS.Signals;
  stopGraceMs?: number;
}

/**
 * One child process of the cluster, in its own process group: Ctrl-C in the terminal reaches
 * only the cluster command, which stops its children one by one in reverse order instead of
 * all of them at once. It can be stopped, killed and started again (the scenario suite's faults).
 */
export class ManagedProcess {
  private child?: ChildProcess;
  private log?: WriteStream;
  private readonly output = tail(6000);
  private stopping = false;
  /** Called when the process exits without stop() or kill() asking it to. */
  onUnexpectedExit?: (why: string) => void;
  /** What the process wrote to stderr since it was last started (ready checks read it). */
  stderrSeen = '';

  constructor(public spec: ProcessSpec) {}

  get name(): string {
    return this.spec.name;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return Boolean(this.child && this.child.exitCode === null && this.child.signalCode === null);
  }

  /** The last few thousand characters the process wrote. */
  get recentOutput(): string {
    return this.output.text;
  }

  /** Spawns the process and waits until it is ready; fails (and stops it) when it exits first. */
  async start(logger: Logger): Promise<void> {
    if (this.running) throw new Error(`${this.name} is already running`);
    const { spec } = this;
    this.stopping = false;
    this.stderrSeen = '';
    this.log ??= spec.logFile ? createWriteStream(spec.logFile, { flags: 'a' }) : undefined;
    const child = spawn(spec.command, spec.args, { cwd: spec.cwd, env: spec.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    this.child = child;
    let exited: string | undefined;
    child.once('error', (err) => (exited = `could not start: ${err.message}`));
    child.stderr!.on('data', (chunk: Buffer) => {
      this.output.push(chunk);
      this.stderrSeen = (this.stderrSeen + chunk.toString()).slice(-20_000);
      this.log?.write(chunk);
    });
    if (spec.onStdoutLine) {
      createInterface({ input: child.stdout! }).on('line', (line) => spec.onStdoutLine!(line));
    } else {
      child.stdout!.on('data', (chunk: Buffer) => {
        this.output.push(chunk);
        this.log?.write(chunk);
      });
    }
    child.once('exit', (code, signal) => {
      exited = `exited (${signal ?? code})`;
      if (this.child === child && !this.stopping) {
        const why = `${this.name} ${exited}: ${this.output.text.slice(-1500)}`;
        logger.warn({ process: this.name, code, signal }, `${this.name} exited unexpectedly`);
        this.onUnexpectedExit?.(why);
      }
    });
    try {
      await waitFor(
        this.name,
        () => spec.ready(this),
        spec.readyTimeoutMs,
        () => (exited ? `${exited}: ${this.output.text}` : undefined),
      );
    } catch (err) {
      await this.kill();
      throw err;
    }
  }

  /** Asks the process to stop (its stop signal), SIGKILLs it after the grace time. */
  async stop(): Promise<void> {
    this.stopping = true;
    await stopChild(this.child, this.spec.stopSignal ?? 'SIGTERM', this.spec.stopGraceMs ?? 20_000);
  }

  /** SIGKILL: a crash, not a shutdown. */
  async kill(): Promise<void> {
    this.stopping = true;
    await stopChild(this.child, 'SIGKILL');
  }

  /** Closes the log file (after the last stop). */
  async close(): Promise<void> {
    const log = this.log;
    this.log = undefined;
    if (log) await new Promise<void>((ok) => log.end(ok));
  }
}
