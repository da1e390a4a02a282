import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import {
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryActivityOutboundInterceptor,
  makeWorkflowExporter,
} from '@temporalio/interceptors-opentelemetry';
import { fileURLToPath } from 'node:url';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode, type LogLevel, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Logger } from '../platform/logger.js';
import { createActivities } from '../../activities/index.js';
import type { Services } from '../services.js';
import { bundledConverters, workerDataConverter } from './data-converter.js';

export const workflowsPath = fileURLToPath(new URL('../../workflows/index.ts', import.meta.url));
/** Tracing's workflow interceptors: they act only on runs that carry a trace context. */
export const workflowInterceptorsPath = fileURLToPath(new URL('../../workflows/tracing.interceptors.ts', import.meta.url));
/** The interceptors that refuse input the service did not produce: first, so nothing else sees it before. */
export const trustInterceptorsPath = fileURLToPath(new URL('../../workflows/trust.interceptors.ts', import.meta.url));

/**
 * The workflow modules that hold no state of a run and call no workflow API: plain data and pure
 * functions (the graph, its values and state, the error catalogue, the loop's and the agent
 * turn's pure steps). The worker evaluates them once per workflow thread instead of once per run
 * (the SDK's module preloading): a run's first workflow task then evaluates only the modules that
 * issue commands. Preloaded modules are shared by every run and frozen by the SDK, so a module
 * that keeps anything at module level, or mutates what it exports, must never be listed here.
 * One listed module is no pure one: stack-traces.ts sets the sandbox's stack formatter once,
 * before the SDK freezes the sandbox. Only the SDK's reusable workflow context preloads modules
 * (WORKER_TUNING keeps it on).
 */
export const preloadedWorkflowModules = [
  'defs.ts',
  'error-codes.ts',
  'graph.ts',
  'run-values.ts',
  'references.ts',
  'template-scan.mjs',
  'run-state.ts',
  'local-gate.ts',
  'for-each-state.ts',
  'slots.ts',
  'agent-turn.ts',
  'stack-traces.ts',
].map((file) => fileURLToPath(new URL(`../../workflows/${file}`, import.meta.url)));

/** What every bundle of the service's workflow code is built with besides its workflows: interceptors, converters, preloading. */
export const bundleOptions = {
  workflowInterceptorModules: [trustInterceptorsPath, workflowInterceptorsPath],
  preloadModules: preloadedWorkflowModules,
  ...bundledConverters,
};

/** Bundles the deterministic workflow code once; workers reuse the bundle. */
export async function bundleWorkflows(): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({
    workflowsPath,
    ...bundleOptions,
    logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} },
  });
}

let runtimeInstalled = false;
/** Where the Temporal SDK's core serves its own Prometheus metrics (loopback, a free port). */
let sdkMetricsUrl: string | undefined;

/** The Temporal SDK's metrics (task slots, schedule-to-start latency, sticky cache...), when a worker runs here. */
export async function temporalSdkMetrics(): Promise<string | undefined> {
  if (!sdkMetricsUrl) return undefined;
  const response = await fetch(sdkMetricsUrl, { signal: AbortSignal.timeout(2000) });
  return response.ok ? response.text() : undefined;
}

/** A free loopback port (the SDK's core binds it itself, so it is found first). */
function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Routes the Temporal SDK's own log lines into the service's JSON log, and has its core serve its
 * metrics on a loopback port that the service's /metrics merges in (once per process).
 */
export async function installTemporalRuntime(logger: Logger): Promise<void> {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  const port = await freeLoopbackPort();
  const levels: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
    TRACE: 'trace',
    DEBUG: 'debug',
    INFO: 'info',
    WARN: 'warn',
    ERROR: 'error',
  };
  const child = logger.child({ component: 'temporal-sdk' });
  Runtime.install({
    logger: new DefaultLogger('WARN', (entry) => child[levels[entry.level]](entry.meta ?? {}, entry.message)),
    telemetryOptions: {
      metrics: {
        metricPrefix: 'temporal_',
        prometheus: { bindAddress: `127.0.0.1:${port}`, countersTotalSuffix: true, unitSuffix: true, useSecondsForDurations: true },
      },
    },
  });
  sdkMetricsUrl = `http://127.0.0.1:${port}/metrics`;
}

/** Worker options of the service's workers (docs/performance.md has the measurements). */
export const WORKER_TUNING = {
  // The SDK's default, said here because the preloaded modules need it: without one reused
  // context nothing is preloaded, and the sandbox's stack formatter (stack-traces.ts) is not set.
  reuseV8Context: true,
  maxCachedWorkflows: 1000,
  // A run started eagerly comes back to this worker only when a workflow-task slot is free at
  // that moment; without one its first task waits in the task queue for a poller, seconds under a
  // burst. A webhook is answered before its run's last workflow task completes, so the tasks held
  // here outnumber the requests in flight: at 50 requests at a time the slots in use reached 96
  // (docs/performance.md), and with 100 slots one run in ten went through the queue. Kept under
  // the cache: each task held is a cached run's.
  maxConcurrentWorkflowTaskExecutions: 500,
  maxConcurrentActivityTaskExecutions: 200,
  workflowTaskPollerBehavior: { type: 'simple-maximum', maximum: 20 },
  activityTaskPollerBehavior: { type: 'simple-maximum', maximum: 20 },
} as const;

export interface RunningWorker {
  worker: Worker;
  /** The worker's own connection: a client on it can start runs eagerly on this worker. */
  connection: NativeConnection;
  /** Resolves when the worker has stopped (after shutdown or a fatal error). */
  done: Promise<void>;
  shutdown(): Promise<void>;
}

/**
 * Starts a Temporal worker on the service's task queue. `bundlePath` points at a prebuilt
 * workflow bundle (SVC_WORKFLOW_BUNDLE); without it the workflows are bundled at start.
 */
/** How long a starting worker waits for Temporal before it gives up. */
const CONNECT_PATIENCE_MS = 120_000;

/**
 * Connects to Temporal, retrying with backoff for up to two minutes: a worker started while
 * Temporal restarts (or before it is up, as containers start in any order) waits for it
 * instead of exiting.
 */
async function connectPatiently(address: string, logger: Logger): Promise<NativeConnection> {
  const deadline = Date.now() + CONNECT_PATIENCE_MS;
  for (let delay = 500; ; delay = Math.min(delay * 2, 5_000)) {
    try {
      return await NativeConnection.connect({ address });
    } catch (err) {
      if (Date.now() + delay > deadline) throw err;
      logger.warn({ address, err: (err as Error).message, retry_in_ms: delay }, 'Temporal is not reachable yet; the worker waits');
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

export async function startWorker(services: Services, address: string, options: { taskQueue?: string; bundlePath?: string } = {}): Promise<RunningWorker> {
  await installTemporalRuntime(services.logger);
  const { tracing } = services;
  const connection = await connectPatiently(address, services.logger);
  const workflowBundle = options.bundlePath ? { code: await readFile(options.bundlePath, 'utf8') } : await bundleWorkflows();
  const worker = await Worker.create({
    connection,
    namespace: services.config.TEMPORAL_NAMESPACE,
    taskQueue: options.taskQueue ?? services.config.TEMPORAL_TASK_QUEUE,
    workflowBundle,
    activities: createActivities(services),
    // Only what the service itself encrypted is input; failure messages are encrypted too.
    dataConverter: workerDataConverter(services.temporal.codec),
    // Traced runs' workflow spans leave through this sink; without tracing it drops them.
    sinks: {
      exporter:
        tracing.workflowSpans && tracing.resource
          ? makeWorkflowExporter(tracing.workflowSpans, tracing.resource)
          : { export: { fn: () => undefined, callDuringReplay: false } },
    },
    ...(tracing.enabled
      ? {
          interceptors: {
            activity: [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) })],
          },
        }
      : {}),
    shutdownGraceTime: '10s',
    // Measured on two cores (docs/performance.md): runs stay cached between their workflow tasks
    // (a replay from scratch per task costs twice the CPU), enough task slots that every run
    // started eagerly finds one, and enough pollers that a burst is picked up at once.
    ...WORKER_TUNING,
  });
  const done = worker.run().finally(() => connection.close().catch(() => undefined));
  done.catch((err) => services.logger.error({ err }, 'Temporal worker stopped with an error'));
  return {
    worker,
    connection,
    done: done.catch(() => undefined),
    async shutdown() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await done.catch(() => undefined);
    },
  };
}
