import { Client, Connection, defaultGrpcRetryOptions, isRetryableError, makeGrpcRetryInterceptor } from '@temporalio/client';
import { defaultPayloadConverter, NamespaceNotFoundError, WorkflowNotFoundError, type Payload } from '@temporalio/common';
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry';
import proto from '@temporalio/proto';
import type { Config } from '../config.js';
import type { KeyRing } from '../platform/crypto.js';
import { EncryptionCodec } from './codec.js';
import { clientDataConverter } from './data-converter.js';

export interface TemporalHandle {
  connection: Connection;
  client: Client;
  codec: EncryptionCodec;
  /** Decodes one payload (decrypt, then JSON) as found in raw history events. */
  decode(payload: Payload): Promise<unknown>;
  /**
   * Set when a worker on the service's task queue runs in this process: starts through it ask
   * Temporal to hand the run's first workflow task straight back (eager start), saving a dispatch.
   */
  eagerClient?: Client;
  /** Web UI base URL for links to runs. */
  uiUrl: string;
  taskQueue: string;
  namespace: string;
  /** Temporal workflow id of an execution: this prefix and the execution id. */
  executionWorkflowPrefix: string;
  executionWorkflowId(executionId: number): string;
  /** Temporal Schedule id of a schedule-triggered workflow. */
  scheduleId(workflowId: number): string;
  /** Starts, updates and signals carry the caller's trace (tracing is on). */
  traced: boolean;
}

/**
 * Transient gRPC failures are retried a few times (about 3 seconds of backoff), not the client's
 * default ten (about 20 seconds): while Temporal is down a request should get its 503 promptly
 * rather than hang. Long polls (a run's result, an update's outcome) are not affected: they only
 * retry on errors, however long they wait.
 */
const RETRY_ATTEMPTS = 6;
const retryInterceptor = () => {
  const defaults = defaultGrpcRetryOptions();
  return makeGrpcRetryInterceptor({ ...defaults, retryableDecider: (attempt, status) => attempt < RETRY_ATTEMPTS && isRetryableError(status) });
};

/**
 * A lazy connection: the API starts and answers 503 while Temporal is down instead of refusing
 * to start, and reconnects by itself when it comes back.
 */
export function connectTemporal(config: Config, address: string, keys: KeyRing, options: { traced?: boolean } = {}): TemporalHandle {
  const connection = Connection.lazy({
    address,
    connectTimeout: '5s',
    interceptors: [retryInterceptor()],
    // gRPC backs off reconnecting up to two minutes by default: after a long Temporal outage the
    // API would keep answering 503 that long after Temporal is back. Retry at least every 5 s.
    channelArgs: { 'grpc.initial_reconnect_backoff_ms': 500, 'grpc.max_reconnect_backoff_ms': 5_000 },
  });
  const codec = new EncryptionCodec(keys);
  const client = new Client({
    connection,
    namespace: config.TEMPORAL_NAMESPACE,
    dataConverter: clientDataConverter(codec),
    // With tracing on, starts, updates and signals carry the caller's trace into the workflow.
    ...(options.traced ? { interceptors: { workflow: [new OpenTelemetryWorkflowClientInterceptor()] } } : {}),
  });
  return {
    connection,
    client,
    codec,
    async decode(payload) {
      const [plain] = await codec.decode([payload]);
      return defaultPayloadConverter.fromPayload(plain!);
    },
    uiUrl: config.TEMPORAL_UI_URL ?? `http://localhost:${config.TEMPORAL_UI_PORT}`,
    taskQueue: config.TEMPORAL_TASK_QUEUE,
    namespace: config.TEMPORAL_NAMESPACE,
    executionWorkflowPrefix: `${config.SVC_INSTANCE_ID}-execution-`,
    executionWorkflowId: (id) => `${config.SVC_INSTANCE_ID}-execution-${id}`,
    scheduleId: (id) => `${config.SVC_INSTANCE_ID}-workflow-${id}`,
    traced: options.traced === true,
  };
}

/** True when the Temporal frontend answers a health check within `timeoutMs`. */
export async function temporalHealthy(handle: TemporalHandle, timeoutMs = 2000): Promise<boolean> {
  try {
    const deadline = new Date(Date.now() + timeoutMs);
    await handle.connection.withDeadline(deadline, () => handle.connection.healthService.check({}));
    return true;
  } catch {
    return false;
  }
}

/** gRPC status codes Temporal answers that say something about the request, not the server's health. */
const GRPC_NOT_FOUND = 5;
const GRPC_REFUSED = new Set([3, 6, 9]); // INVALID_ARGUMENT, ALREADY_EXISTS, FAILED_PRECONDITION
const NAMESPACE_NOT_FOUND = 'temporal.api.errordetails.v1.NamespaceNotFoundFailure';

/**
 * Whether a raw gRPC NOT_FOUND is Temporal's answer for a namespace it does not know (its status
 * details name a NamespaceNotFoundFailure): calls made on the workflow service directly get it so,
 * not as the client's NamespaceNotFoundError.
 */
function namespaceNotFound(grpc: { metadata?: unknown }): boolean {
  const metadata = grpc.metadata as { get?: (key: string) => unknown[] } | undefined;
  const status = typeof metadata?.get === 'function' ? metadata.get('grpc-status-details-bin')[0] : undefined;
  if (!(status instanceof Uint8Array)) return false;
  try {
    return proto.google.rpc.Status.decode(status).details.some((d) => d.type_url?.endsWith(NAMESPACE_NOT_FOUND));
  } catch {
    return false;
  }
}

/**
 * What a failed Temporal call means for the caller: `missing` (no such run, its history past
 * retention), `refused` (Temporal declined the request as made), or `unavailable` (anything
 * else a call to the server can fail with: down, overloaded, timed out). Undefined for errors
 * that did not come from a Temporal call.
 */
export function temporalFailure(err: unknown): { kind: 'missing' | 'refused' | 'unavailable'; detail: string } | undefined {
  // The client turns some gRPC answers into errors of their own, without the gRPC status: a run
  // Temporal does not know, and a namespace it does not know. The namespace is the service's own
  // configuration (or a server that lost it for a moment), never the caller's mistake.
  if (err instanceof WorkflowNotFoundError) return { kind: 'missing', detail: err.message };
  if (err instanceof NamespaceNotFoundError) return { kind: 'unavailable', detail: err.message };
  // The worker's native connection (the eager client's) reports a broken transport so.
  if ((err as { name?: unknown })?.name === 'TransportError') return { kind: 'unavailable', detail: (err as Error).message ?? '' };
  const e = err as
    { name?: string; code?: unknown; details?: unknown; metadata?: unknown; cause?: { code?: unknown; details?: unknown; metadata?: unknown } } | undefined;
  const grpc = typeof e?.code === 'number' && typeof e?.details === 'string' ? e : e?.name === 'ServiceError' ? e.cause : undefined;
  if (!grpc && e?.name !== 'ServiceError') return undefined;
  const code = typeof grpc?.code === 'number' ? grpc.code : undefined;
  const detail = typeof grpc?.details === 'string' ? grpc.details : '';
  if (code === GRPC_NOT_FOUND) return { kind: grpc && namespaceNotFound(grpc) ? 'unavailable' : 'missing', detail };
  if (code !== undefined && GRPC_REFUSED.has(code)) return { kind: 'refused', detail };
  return { kind: 'unavailable', detail };
}
