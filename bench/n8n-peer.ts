/**
 * The n8n performance peer, run through its own scripts (install.sh, start.sh, stop.sh, bench.mjs
 * and the README with its settings, in the `shared/peers/n8n` folder beside the repository).
 * Nothing here changes them: the benchmark only chooses where they run.
 *
 *  - The scripts: `N8N_PEER_SCRIPTS`, else the first `shared/peers/n8n` found beside the
 *    repository or beside one of its parent folders (`../shared/peers/n8n` in CI and in a clone;
 *    a git worktree sits a level deeper).
 *  - The install: `N8N_PEER_DIR` (default `~/.cache/n8n-peer`, as install.sh has it); install.sh
 *    runs when n8n is missing there, once, for about 10 minutes.
 *  - Each benchmark run starts n8n from a scratch folder of its own (its SQLite database, logs and
 *    pid files; `node_modules` a link to the install) on free loopback ports, so it neither reuses
 *    nor stops an n8n someone else started from the same install. The local target W1 and W2 call
 *    is 127.0.0.1:5699, as the peer's workflows name it.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tail } from '../src/platform/child-process.js';
import { freePort } from '../test/helpers/ports.js';

const root = fileURLToPath(new URL('..', import.meta.url));

/** The address W1 and W2 call (hard-coded in the peer's workflow files). */
export const PEER_TARGET = 'http://127.0.0.1:5699';

/** Where the peer's scripts are, or undefined. */
export function findPeerScripts(): string | undefined {
  if (process.env.N8N_PEER_SCRIPTS) return resolve(process.env.N8N_PEER_SCRIPTS);
  for (let dir = resolve(root); ; dir = dirname(dir)) {
    const candidate = join(dirname(dir), 'shared', 'peers', 'n8n');
    if (existsSync(join(candidate, 'start.sh'))) return candidate;
    if (dirname(dir) === dir) return undefined;
  }
}

/** Runs a script of the peer to its end; its output (last 4 KB) with the failure. */
function runScript(script: string, env: NodeJS.ProcessEnv, timeoutMs: number, onLine?: (line: string) => void): Promise<string> {
  return new Promise((ok, fail) => {
    const output = tail(4000);
    const child = spawn('bash', [script], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    for (const stream of [child.stdout!, child.stderr!]) {
      stream.on('data', (c: Buffer) => {
        output.push(c);
        for (const line of c.toString().split('\n')) if (line.trim()) onLine?.(line.trim());
      });
    }
    child.once('error', fail);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) ok(output.text);
      else fail(new Error(`${script} failed (${signal ?? code}): ${output.text}`));
    });
  });
}

export interface N8nPeer {
  version: string;
  /** W1 and W2's URLs. */
  w1: string;
  w2: string;
  /** n8n's main process; its task runner is a child of it. */
  pid: number;
  /** Runs the peer's bench.mjs with `env` (its one JSON line, parsed). */
  bench(env: Record<string, string>): Promise<Record<string, unknown>>;
  stop(): Promise<void>;
}

/**
 * Installs n8n when missing and starts it; undefined, with the reason, when it cannot (no scripts,
 * the install failed, n8n did not start): the benchmark goes on without it.
 */
export async function startN8nPeer(scratch: string, log: (line: string) => void): Promise<N8nPeer | { skipped: string }> {
  const scripts = findPeerScripts();
  if (!scripts) return { skipped: 'its scripts were not found (shared/peers/n8n beside the repository; N8N_PEER_SCRIPTS names another folder)' };
  const installDir = process.env.N8N_PEER_DIR ?? join(homedir(), '.cache', 'n8n-peer');
  const base = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? homedir() };
  if (!existsSync(join(installDir, 'node_modules', '.bin', 'n8n'))) {
    log(`n8n peer: not installed in ${installDir}; running install.sh (about 10 minutes)`);
    try {
      await runScript(join(scripts, 'install.sh'), { ...base, N8N_PEER_DIR: installDir }, 40 * 60_000, (l) => log(`install.sh: ${l}`));
    } catch (err) {
      return { skipped: `install.sh could not install it into ${installDir}: ${(err as Error).message.split('\n').slice(-3).join(' ')}` };
    }
  }
  const version = (JSON.parse(readFileSync(join(installDir, 'node_modules', 'n8n', 'package.json'), 'utf8')) as { version: string }).version;
  const dir = join(scratch, 'n8n-peer');
  mkdirSync(dir, { recursive: true });
  symlinkSync(join(installDir, 'node_modules'), join(dir, 'node_modules'));
  const port = await freePort();
  const env = {
    ...base,
    N8N_PEER_DIR: dir,
    N8N_PORT: String(port),
    // Its task runner's broker, on a port of its own too.
    N8N_RUNNERS_BROKER_PORT: String(await freePort()),
    N8N_LOG_LEVEL: 'warn',
  };
  const stop = async () => {
    await runScript(join(scripts, 'stop.sh'), env, 60_000).catch((err: Error) => log(`n8n peer: stop.sh: ${err.message}`));
  };
  try {
    await runScript(join(scripts, 'start.sh'), env, 10 * 60_000, (l) => log(`start.sh: ${l}`));
  } catch (err) {
    await stop();
    return { skipped: `start.sh could not start it: ${(err as Error).message.split('\n').slice(-5).join(' ')}` };
  }
  const pid = Number(readFileSync(join(dir, 'n8n.pid'), 'utf8').trim());
  const url = `http://127.0.0.1:${port}`;
  return {
    version,
    w1: `${url}/webhook/bench`,
    w2: `${url}/webhook/bench-items`,
    pid,
    bench: (benchEnv) => runBench(scripts, { ...env, BENCH_URL: url, ...benchEnv }),
    stop,
  };
}

/** bench.mjs with `env`: its one JSON line on stdout. */
function runBench(scripts: string, env: NodeJS.ProcessEnv): Promise<Record<string, unknown>> {
  return new Promise((ok, fail) => {
    const child = spawn(process.execPath, [join(scripts, 'bench.mjs')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    const stderr = tail(2000);
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => stderr.push(c));
    child.once('error', fail);
    child.once('exit', (code) => {
      const line = stdout.trim().split('\n').at(-1) ?? '';
      try {
        ok(JSON.parse(line) as Record<string, unknown>);
      } catch {
        fail(new Error(`bench.mjs (exit ${code}) printed no result: ${stderr.text}`));
      }
    });
  });
}
