import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { projectRoot } from './helpers/cli.js';

/**
 * docker-compose.yml as `docker-compose config` resolves it. Temporal's frontend takes no
 * credentials and whoever reaches it acts on every run, so the file publishes it on no host port,
 * and the Web UI (no sign-in of its own either) only on the host's loopback.
 */
function composeConfig(extraFiles: string[] = []): Promise<string> {
  const files = ['docker-compose.yml', ...extraFiles].flatMap((f) => ['-f', f]);
  return new Promise((resolve, reject) =>
    execFile(
      'docker-compose',
      [...files, 'config'],
      { cwd: projectRoot, timeout: 60_000, env: { ...process.env, POSTGRES_PASSWORD: 'compose-test', SVC_ENCRYPTION_KEY: 'compose-test' } },
      (err, stdout, stderr) => (err ? reject(new Error(stderr || err.message)) : resolve(stdout)),
    ),
  );
}

/** Whether a resolved service publishes `target` on `published` of the host's loopback (compose v1 and v2 print ports differently). */
const onLoopback = (published: number, target: number) =>
  new RegExp(
    `127\\.0\\.0\\.1:${published}:${target}|host_ip: 127\\.0\\.0\\.1\\n\\s+(mode: \\w+\\n\\s+)?(protocol: \\w+\\n\\s+)?published: ["']?${published}["']?\\n\\s+target: ${target}`,
  );

/** The lines of one service in the resolved file. */
function service(config: string, name: string): string {
  const lines = config.split('\n');
  const start = lines.indexOf(`  ${name}:`);
  expect(start, `service ${name}`).toBeGreaterThanOrEqual(0);
  const end = lines.findIndex((line, i) => i > start && /^ {2}\S/.test(line));
  return lines.slice(start, end === -1 ? undefined : end).join('\n');
}

describe('docker-compose.yml', () => {
  it('publishes no port of the Temporal frontend, and the Web UI on loopback only', async () => {
    const config = await composeConfig();
    const temporal = service(config, 'temporal');
    expect(temporal).not.toMatch(/^ {4}ports:/m);
    expect(config).not.toMatch(/published: ["']?7233|:7233:7233/);
    const ui = service(config, 'temporal-ui');
    expect(ui).toMatch(onLoopback(8233, 8080));
    expect(ui).not.toMatch(/^\s+- ["']?(0\.0\.0\.0:)?8233:8080/m);
  });

  it('publishes the frontend on loopback with the documented override, for an operator on the host', async () => {
    const config = await composeConfig(['deploy/compose.temporal-port.yml']);
    expect(service(config, 'temporal')).toMatch(onLoopback(7233, 7233));
  });
});
