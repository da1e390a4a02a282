/**
 * Runs `work` while heartbeating every `everyMs`: a long call (a model's answer can take minutes)
 * lets Temporal notice a dead worker in seconds and retry elsewhere, instead of waiting for the
 * start-to-close timeout. The heartbeats stop when `work` settles, whichever way.
 */
export async function withHeartbeat<T>(context: { heartbeat(details?: unknown): void }, work: () => Promise<T>, everyMs = 1000): Promise<T> {
  const beat = setInterval(() => context.heartbeat(), everyMs);
  try {
    return await work();
  } finally {
    clearInterval(beat);
  }
}
