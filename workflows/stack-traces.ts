/**
 * How an error made in workflow code prints its stack: V8's own format, each frame's function and
 * its position in the workflow bundle (the bundle the worker runs, with its source map inline, maps
 * a position back to workflows/; docs/operators.md says where to find it).
 *
 * The worker evaluates this module before it freezes the workflow sandbox's globals. Node formats
 * an error with the `Error.prepareStackTrace` of the realm that made it, so the sandbox's own
 * formatter below is used instead of the Temporal SDK's. The SDK's formatter maps every frame
 * through the bundle's source map and, for every promise a run creates, makes an error from outside
 * the sandbox's code to record where the promise was created (what Temporal's stack trace query
 * answers): about a sixth of the CPU of a one-node run's workflow task. Such an error (its first
 * frame in a file that is not the bundle) is given no stack here, so the SDK records nothing and the
 * query answers no stacks; a run's progress is its timeline, and a stuck run's pending step is
 * named there. An error thrown by a builtin (its first frame has no file) keeps its stack.
 */
interface CallSite {
  getFileName(): string | null | undefined;
  toString(): string;
}
type Formatter = (error: Error, frames: CallSite[]) => unknown;
const SandboxError = Error as unknown as { prepareStackTrace?: Formatter; captureStackTrace(target: object): void };

/** The file V8 names for the bundle's frames, read from this module's own frame. */
const bundleFile = ((): string | undefined => {
  SandboxError.prepareStackTrace = (_error, frames) => frames[0]?.getFileName();
  const probe: { stack?: unknown } = {};
  SandboxError.captureStackTrace(probe);
  return typeof probe.stack === 'string' && probe.stack !== '' ? probe.stack : undefined;
})();

SandboxError.prepareStackTrace = (error, frames) => {
  const first = frames[0]?.getFileName();
  if (bundleFile && first && first !== bundleFile) return '';
  return `${String(error)}${frames.map((frame) => `\n    at ${frame.toString()}`).join('')}`;
};

export {};
