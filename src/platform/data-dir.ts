import { chmod, chown, lstat, mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from './logger.js';

/**
 * Makes the embedded default's data directory (`SVC_DATA_DIR`, `.data/`) private before anything
 * is written to it, and again on every start (a directory made by an earlier version, or opened
 * by hand): mode 0700, and every file directly in it (the service key, the Temporal database and
 * its journal files, PostgreSQL's password file) readable by its owner only. When PostgreSQL runs
 * as another user (`postgresGid`: the service runs as root), the directory is 0710 with that
 * user's group, so PostgreSQL can pass through to its own cluster (`pg/`, 0700, its own) and
 * list nothing; no other account may enter it.
 */
export async function makeDataDirPrivate(dir: string, logger: Logger, postgresGid?: number): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  try {
    if (postgresGid !== undefined) await chown(dir, process.getuid?.() ?? 0, postgresGid);
    await chmod(dir, postgresGid !== undefined ? 0o710 : 0o700);
    for (const name of await readdir(dir)) {
      const path = join(dir, name);
      const entry = await lstat(path);
      if (entry.isFile() && entry.mode & 0o077) await chmod(path, entry.mode & 0o700);
    }
  } catch (err) {
    // A directory the service does not own (a mount, another account's): say so, do not stop.
    logger.warn({ dir, err: (err as Error).message }, 'the data directory could not be made private; restrict it yourself (mode 0700)');
  }
}
