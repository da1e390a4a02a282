import { execFile, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const phpDriver = fileURLToPath(new URL('../php/driver.php', import.meta.url));
export const phpClientFile = fileURLToPath(new URL('../../clients/php/LicenseClient.php', import.meta.url));

const hasPhp = () => spawnSync('php', ['-v'], { stdio: 'ignore' }).status === 0;

/**
 * Makes sure `php` (with sodium) is there: when it is missing, installs Debian's php-cli, as the
 * test machine and CI run as root on Debian. Fails with what to do when it cannot.
 */
export function ensurePhp(): void {
  if (!hasPhp()) {
    if (process.getuid?.() !== 0 || spawnSync('apt-get', ['--version'], { stdio: 'ignore' }).status !== 0) {
      throw new Error('php is missing: install PHP 8.1+ with the sodium extension (Debian: apt-get install php-cli) to run the PHP client tests');
    }
    const install = spawnSync('sh', ['-c', 'apt-get install -y -qq php-cli || (apt-get update -qq && apt-get install -y -qq php-cli)'], {
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
      encoding: 'utf8',
      timeout: 600_000,
    });
    if (install.status !== 0 || !hasPhp()) {
      throw new Error(`php is missing and installing php-cli failed (exit ${install.status}):\n${(install.stderr || install.stdout || '').slice(-2000)}`);
    }
  }
  const sodium = spawnSync('php', ['-r', 'exit(function_exists("sodium_crypto_sign_verify_detached") ? 0 : 1);']);
  if (sodium.status !== 0) throw new Error('php has no sodium extension, which the PHP licence client needs (Debian php-cli has it)');
}

export interface PhpRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runPhp(args: string[], timeoutMs = 60_000): Promise<PhpRun> {
  return new Promise((resolve) => {
    execFile('php', args, { timeout: timeoutMs, encoding: 'utf8' }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Runs one call of the PHP client through test/php/driver.php and parses its JSON answer. */
export async function phpClient<T = Record<string, any>>(command: Record<string, unknown>): Promise<T> {
  const run = await runPhp(['-f', phpDriver, '--', JSON.stringify(command)]);
  if (run.code !== 0) throw new Error(`php failed (${run.code}): ${run.stderr}${run.stdout}`);
  try {
    return JSON.parse(run.stdout) as T;
  } catch {
    throw new Error(`php printed no JSON: ${run.stdout}${run.stderr}`);
  }
}
