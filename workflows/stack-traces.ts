/**
 * How an error made in workflow code prints its stack: V8's own format, each frame's function and
 * its position in the workflow bundle (`npm run svc -- bundle-workflows --out FILE` writes that
 * bundle, with its source map inline, for mapping a position back to workflows/).
 *
 * The worker evaluates this module before it freezes the workflow sandbox's globals. Node formats
 * an error with the `Error.prepareStackTrace` of the realm that made it, so the sandbox's own
 * formatter below is used instead of the Temporal SDK's. The SDK's formatter maps every frame
 * through the bundle's source map and, for every promise a run creates, records where it was
 * created (what Temporal's stack trace query answers): about a sixth of the CPU of a one-node
 * run's workflow task. With this formatter the SDK records nothing and the query answers no stacks; a
 * run's progress is its timeline, and a stuck run's pending step is named there.
 */
type CallSite = { toString(): string };
(Error as unknown as { prepareStackTrace: (error: Error, frames: CallSite[]) => string }).prepareStackTrace = (error, frames) =>
  `${String(error)}${frames.map((frame) => `\n    at ${frame.toString()}`).join('')}`;

export {};
