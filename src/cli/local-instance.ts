import { readFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { isPortOpen } from '../platform/child-process.js';

/**
 * The instance of the service that runs from a data directory, as a one-shot command beside it
 * finds it: `npm start` keeps its PostgreSQL in `<data>/pg`, `npm run cluster` in
 * `<data>/cluster/pg`, each with its password beside it (`pg.password`). A running server says
 * where it listens in its `postmaster.pid` (fourth line: the port), whatever port setting
 * started it, so the command needs neither the same port setting nor a guess.
 */
export interface LocalInstance {
  kind: 'npm start' | 'npm run cluster';
  /** The instance's own data directory (its encryption key is there): SVC_DATA_DIR for the command. */
  dataDir: string;
  port: number;
  /** The PostgreSQL server, as its superuser, on its `postgres` database. */
  serverUrl: string;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, under another user (the postgres user, when the service runs as root).
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

async function runningFrom(kind: LocalInstance['kind'], dataDir: string, pgDir: string): Promise<LocalInstance | undefined> {
  let lines: string[];
  try {
    lines = (await readFile(join(pgDir, 'postmaster.pid'), 'utf8')).split('\n');
  } catch {
    return undefined;
  }
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  // A file left by a server that was killed: nothing runs there.
  if (!Number.isInteger(pid) || !Number.isInteger(port) || !alive(pid) || !(await isPortOpen(port))) return undefined;
  let password: string;
  try {
    password = (await readFile(join(dirname(pgDir), `${basename(pgDir)}.password`), 'utf8')).trim();
  } catch (err) {
    throw new Error(
      `PostgreSQL of ${kind} runs from ${pgDir} (port ${port}) but its password file cannot be read (${(err as NodeJS.ErrnoException).code}); set DATABASE_URL`,
    );
  }
  return { kind, dataDir, port, serverUrl: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres` };
}

/** The instances that run from `dataDir` (SVC_DATA_DIR): npm start's, npm run cluster's, both or none. */
export async function runningInstances(dataDir: string): Promise<LocalInstance[]> {
  const root = resolve(dataDir);
  const found = await Promise.all([
    runningFrom('npm start', root, join(root, 'pg')),
    runningFrom('npm run cluster', join(root, 'cluster'), join(root, 'cluster', 'pg')),
  ]);
  return found.filter((i): i is LocalInstance => i !== undefined);
}
