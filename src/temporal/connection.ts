import { Client, Connection } from '@temporalio/client';
import type { Config } from '../config.js';

export interface TemporalHandle {
  connection: Connection;
  client: Client;
  /** Web UI base URL for links to runs. */
  uiUrl: string;
  taskQueue: string;
  namespace: string;
}

/**
 * A lazy connection: the API starts and answers 503 while Temporal is down instead of refusing
 * to start, and reconnects by itself when it comes back.
 */
export function connectTemporal(config: Config, address: string): TemporalHandle {
  const connection = Connection.lazy({ address, connectTimeout: '5s' });
  const client = new Client({ connection, namespace: config.TEMPORAL_NAMESPACE });
  return {
    connection,
    client,
    uiUrl: config.TEMPORAL_UI_URL ?? `http://localhost:${config.TEMPORAL_UI_PORT}`,
    taskQueue: config.TEMPORAL_TASK_QUEUE,
    namespace: config.TEMPORAL_NAMESPACE,
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
