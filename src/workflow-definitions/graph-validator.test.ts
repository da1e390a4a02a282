import { describe, expect, it } from 'vitest';
import { nodeTypes } from '../nodes/index.js';
import { validateGraph } from './graph-validator.js';

const manual = { type: 'manual', config: {} } as const;

describe('validateGraph', () => {
  it('accepts a valid branching graph', () => {
    const problems = validateGraph(
      {
        nodes: [
          { id: 'if', type: 'condition', config: { expression: '{{ trigger.x > 1 }}' } },
          { id: 'sw', type: 'switch', config: { value: '{{ trigger.kind }}', cases: ['a'] } },
          { id: 'end', type: 'transform', config: { value: 1 } },
        ],
        edges: [
          { from: 'if', to: 'sw', branch: 'true' },
          { from: 'sw', to: 'end', branch: 'default' },
        ],
      },
      manual,
      nodeTypes,
    );
    expect(problems).toEqual([]);
  });

  it('lists each problem with its field', () => {
    const problems = validateGraph(
      {
        nodes: [
          { id: 'a', type: 'delay', config: { duration_ms: -5 } },
          { id: 'b', type: 'switch', config: { value: 1, cases: [] } },
        ],
        edges: [
          { from: 'a', to: 'b', branch: 'x' },
          { from: 'b', to: 'a', branch: 'nope' },
          { from: 'a', to: 'a' },
        ],
      },
      { type: 'schedule', config: { cron: '* *', overlap: 'skip' } },
      nodeTypes,
    );
    const fields = problems.map((p) => p.field);
    expect(fields).toEqual(
      expect.arrayContaining(['nodes.0.config.duration_ms', 'nodes.1.config.cases', 'edges.0.branch', 'edges.1.branch', 'edges.2', 'trigger.config.cron']),
    );
  });
});
