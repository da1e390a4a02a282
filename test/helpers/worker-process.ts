import { spawn, type ChildProcess } from 'node:child_process';
import { inject } from 'vitest';
import type { TestApp } from './app.js';
import { cleanEnv, projectRoot } from './cli.js';

/**
 * A Temporal worker in its own process, as `svc worker` runs in production, serving `app`'s
 * database, task queue, key and id prefix.
 */
export function startWorkerProcess(app: TestApp, extraEnv: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', 'worker'], {
    cwd: projectRoot,
    env: {
      ...cleanEnv(),
      DATABASE_URL: app.databaseUrl,
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      TEMPORAL_TASK_QUEUE: app.config.TEMPORAL_TASK_QUEUE,
      SVC_INSTANCE_ID: app.config.SVC_INSTANCE_ID,
      SVC_ENCRYPTION_KEY: app.config.SVC_ENCRYPTION_KEY!,
      SVC_WORKFLOW_BUNDLE: inject('workflowBundle'),
      SVC_EGRESS_ALLOW: app.config.SVC_EGRESS_ALLOW ?? '',
      // Several worker processes run at once: none takes the metrics port unless a test asks.
      SVC_METRICS_PORT: 'off',
      ...extraEnv,
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

/** SIGKILLs a process (a crash, not a shutdown) and resolves once it is gone. */
export function killProcess(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}
