import { describe, expect, it } from 'vitest';
import { FIRST_STEP_ASKS, LEAN_HISTORY } from '../../workflows/defs.js';
import { firstStepAnswer, type FirstStepSettings } from './first-step.js';

const settings: FirstStepSettings = {
  SVC_LOCAL_PURE_NODES: true,
  SVC_LOCAL_CALL_MAX_MS: 30_000,
  SVC_HISTORY_INLINE_BYTES: 16_384,
  SVC_NODE_CONTEXT_INLINE_BYTES: 65_536,
  SVC_RUN_MAX_PARALLEL_NODES: 50,
};
const execution = { executionId: 7, version: 2, graph: { nodes: [{ id: 'a', type: 'http_request', config: {} }], edges: [] } };

describe("a run's first step", () => {
  it('grants what the workflow code asks for, and nothing it did not ask for', () => {
    const all = firstStepAnswer(settings, execution, FIRST_STEP_ASKS);
    expect(all).toMatchObject({
      executionId: 7,
      version: 2,
      history: LEAN_HISTORY,
      bounds: { inlineBytes: 16_384 },
      shortLocal: { types: ['http_request'], maxTimeoutMs: 30_000 },
      closeInNode: true,
      localMarkedAtEnd: true,
    });
    // Earlier workflow code asked for nothing: it gets the answer it was written for.
    const none = firstStepAnswer(settings, execution, {});
    for (const key of ['history', 'bounds', 'shortLocal', 'closeInNode', 'localMarkedAtEnd']) expect(none).not.toHaveProperty(key);
    expect(none).toMatchObject({ localPureNodes: true, runModes: { transform: 'local', http_request: 'activity' } });
  });

  it('runs no call locally when SVC_LOCAL_CALL_MAX_MS is 0', () => {
    expect(firstStepAnswer({ ...settings, SVC_LOCAL_CALL_MAX_MS: 0 }, execution, FIRST_STEP_ASKS)).not.toHaveProperty('shortLocal');
  });
});
