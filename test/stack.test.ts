import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { cleanEnv, projectRoot } from './helpers/cli.js';
import { freePorts } from './helpers/ports.js';
import { descendants, isAlive } from './helpers/processes.js';

const APP_PASSWORD = 'stack-test-app-password-0001';
let dataDir: string;

afterAll(async () => {
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

async function waitReady(url: string, child: ChildProcess, output: () => string) {
  const deadline = Date.now() + 150_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`start exited early (${child.exitCode}):\n${output()}`);
    try {
      const res = await fetch(`${url}/readyz`);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`not ready in time:\n${output()}`);
}

async function startService(env: Record<string, string>) {
  let output = '';
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', 'start'], {
    cwd: projectRoot,
    env: { ...cleanEnv(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (c) => (output += c));
  child.stderr!.on('data', (c) => (output += c));
  const url = `http://127.0.0.1:${env.PORT}`;
  await waitReady(url, child, () => output);
  return { child, url, output: () => output };
}

async function stopService(child: ChildProcess, signal: NodeJS.Signals) {
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  child.kill(signal);
  return exited;
}

/**
 * `.data/` is for the service's eyes only: no other account may list or read it, and nothing in it
 * (the Temporal database, the key) is readable by group or others. As root, PostgreSQL runs as the
 * `postgres` user, whose group may only pass through the directory to its own cluster.
 */
function expectPrivate(dataDir: string) {
  const dir = statSync(dataDir);
  if (process.getuid?.() === 0) {
    expect(dir.mode & 0o777, 'data dir mode').toBe(0o710);
    expect(dir.gid, 'data dir group').toBe(Number(execFileSync('id', ['-g', 'postgres']).toString().trim()));
  } else {
    expect(dir.mode & 0o777, 'data dir mode').toBe(0o700);
  }
  for (const name of readdirSync(dataDir)) {
    const entry = statSync(join(dataDir, name));
    if (entry.isFile()) expect(entry.mode & 0o077, `${name} mode ${(entry.mode & 0o777).toString(8)}`).toBe(0);
  }
  for (const name of ['temporal.db', 'encryption.key']) expect(existsSync(join(dataDir, name)), name).toBe(true);
}

describe('npm start (the whole embedded stack)', () => {
  it('starts PostgreSQL, Temporal, the worker and the API, stops all of it on a signal, and reuses the data, which it keeps private', async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'svc-stack-'));
    await chmod(dataDir, 0o755);
    const [api, pg, temporal, ui, codec] = await freePorts(5);
    const env = {
      SVC_DATA_DIR: join(dataDir, 'data'),
      PORT: String(api),
      HOST: '127.0.0.1',
      SVC_EMBEDDED_PG_PORT: String(pg),
      TEMPORAL_PORT: String(temporal),
      TEMPORAL_UI_PORT: String(ui),
      // Not the default 8234: another service on this machine (a benchmark, a developer's
      // npm start) may hold it.
      SVC_CODEC_PORT: String(codec),
      SVC_ADMIN_PASSWORD: 'first-start-password',
      SVC_ADMIN_APP_PASSWORD: APP_PASSWORD,
      SVC_WORKFLOW_BUNDLE: inject('workflowBundle'),
      LOG_LEVEL: 'info',
    };

    const first = await startService(env);
    const children = descendants(first.child.pid!);
    const commands = children.map((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      } catch {
        return '';
      }
    });
    expect(
      commands.some((c: string) => c.includes('postgres')),
      first.output(),
    ).toBe(true);
    expect(
      commands.some((c: string) => c.includes('start-dev')),
      first.output(),
    ).toBe(true);
    expect(first.output()).toContain('Temporal Web UI:');

    const auth = { authorization: 'Basic ' + Buffer.from(`admin:${APP_PASSWORD}`).toString('base64') };
    expect((await fetch(`${first.url}/api/auth/v1/me`, { headers: auth })).status, first.output()).toBe(200);
    // The Temporal Web UI is served on its port.
    expect((await fetch(`http://127.0.0.1:${env.TEMPORAL_UI_PORT}/`)).status, first.output()).toBe(200);

    expect(await stopService(first.child, 'SIGTERM'), first.output()).toBe(0);
    for (const pid of children) expect(isAlive(pid), `child ${pid} still running`).toBe(false);
    expect(existsSync(join(env.SVC_DATA_DIR, 'pg', 'PG_VERSION'))).toBe(true);
    expect(existsSync(join(env.SVC_DATA_DIR, 'temporal.db'))).toBe(true);
    expect(existsSync(join(env.SVC_DATA_DIR, 'encryption.key'))).toBe(true);
    expectPrivate(env.SVC_DATA_DIR);

    // A data directory left open (by an earlier version, or by hand) is closed again at start.
    await chmod(env.SVC_DATA_DIR, 0o755);
    await chmod(join(env.SVC_DATA_DIR, 'temporal.db'), 0o644);

    // Second start: same data, no new admin, the old application password still works.
    const second = await startService({ ...env, SVC_ADMIN_PASSWORD: '' });
    expect(second.output()).not.toContain('Created user "admin"');
    expect((await fetch(`${second.url}/api/auth/v1/me`, { headers: auth })).status, second.output()).toBe(200);
    const secondChildren = descendants(second.child.pid!);
    expect(await stopService(second.child, 'SIGINT'), second.output()).toBe(0);
    for (const pid of secondChildren) expect(isAlive(pid), `child ${pid} still running`).toBe(false);
    expectPrivate(env.SVC_DATA_DIR);
  }, 300_000);
});
