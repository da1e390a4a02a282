import { execFile } from 'node:child_process';
import { inject } from 'vitest';
import { createLogger } from '../../src/platform/logger.js';
import { provisionTemporalCli } from '../../src/platform/temporal-server.js';

let cli: Promise<string> | undefined;

/**
 * Runs the real `temporal` CLI (the binary the project provisions) against the test server, as an
 * operator would from a terminal; resolves with its stdout, rejects with its stderr.
 */
export async function temporalCli(args: string[], namespace = 'default'): Promise<string> {
  cli ??= provisionTemporalCli(createLogger('silent'), process.env.TEMPORAL_CLI);
  const binary = await cli;
  return new Promise((resolve, reject) => {
    execFile(binary, [...args, '--address', inject('temporalAddress'), '--namespace', namespace], { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`temporal ${args.join(' ')} failed: ${stderr || err.message}`));
      else resolve(stdout);
    });
  });
}
