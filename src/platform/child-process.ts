import { spawn, type ChildProcess } from 'node:child_process';
import { connect } from 'node:net';

/** Sends `signal`, waits up to `graceMs` for the exit, then SIGKILLs. Resolves once it is gone. */
export async function stopChild(child: ChildProcess | undefined, signal: NodeJS.Signals, graceMs = 15_000): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** True when something accepts TCP connections on host:port. */
export function isPortOpen(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Polls `check` until it returns true, failing after `timeoutMs` or when `abort` says so. */
export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number, abort?: () => string | undefined): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const reason = abort?.();
    if (reason) throw new Error(`${what}: ${reason}`);
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`${what}: not ready after ${Math.round(timeoutMs / 1000)}s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Keeps the last `limit` characters a child wrote, for error messages when it dies. */
export function tail(limit = 4000) {
  let buffer = '';
  return {
    push(chunk: Buffer | string) {
      buffer = (buffer + chunk.toString()).slice(-limit);
    },
    get text() {
      return buffer.trim();
    },
  };
}

/**
 * Runs a command to its end with its output kept (its last `limit` characters), and fails with
 * that output when it does not exit with 0.
 */
export function runToEnd(what: string, command: string, args: string[], env: NodeJS.ProcessEnv, limit?: number): Promise<void> {
  return new Promise((ok, fail) => {
    const output = tail(limit);
    const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (c) => output.push(c));
    child.stderr!.on('data', (c) => output.push(c));
    child.once('error', fail);
    child.once('exit', (code, signal) => (code === 0 ? ok() : fail(new Error(`${what} failed (${signal ?? code}): ${output.text}`))));
  });
}
