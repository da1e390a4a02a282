import type { Logger } from './logger.js';

/**
 * Resolves once `stop` has run after SIGINT or SIGTERM (or after `stopWhen` settles, which is
 * logged as unexpected). A second signal while stopping calls `atOnce`, which should exit.
 */
export function untilStopped(
  logger: Logger,
  what: { stop: () => Promise<void>; atOnce: () => void; stopWhen?: { done: Promise<unknown>; message: string } },
): Promise<void> {
  return new Promise<void>((resolveStop) => {
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        logger.warn({ signal }, 'second signal: stopping at once');
        what.atOnce();
        return;
      }
      stopping = true;
      logger.info({ signal }, 'stopping');
      what.stop().then(resolveStop, resolveStop);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    what.stopWhen?.done.then(() => {
      if (stopping) return;
      logger.error(what.stopWhen!.message);
      onSignal('SIGTERM');
    });
  });
}
