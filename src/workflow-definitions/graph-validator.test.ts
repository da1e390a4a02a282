import { describe, expect, it } from 'vitest';
import { nodeTypes } from '../nodes/index.js';
import { validateGraph } from './graph-validator.js';
import type { Graph } from '../../workflows/defs.js';

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

describe('validateGraph, one rule at a time', () => {
  const t = (id: string, value: unknown = 1) => ({ id, type: 'transform', config: { value } });
  const check = (graph: Parameters<typeof validateGraph>[0], trigger: Parameters<typeof validateGraph>[1] = manual) => validateGraph(graph, trigger, nodeTypes);

  it('refuses a duplicate node id at the second node', () => {
    expect(check({ nodes: [t('a'), t('a')], edges: [] })).toEqual([{ field: 'nodes.1.id', message: 'duplicate node id "a"' }]);
  });

  it('names an unknown node type and the known ones', () => {
    const [problem, ...rest] = check({ nodes: [{ id: 'x', type: 'shell', config: {} }], edges: [] });
    expect(rest).toEqual([]);
    expect(problem!.field).toBe('nodes.0.type');
    expect(problem!.message).toMatch(/^unknown node type "shell" \(known: .*http_request.*transform.*\)$/);
  });

  it('refuses fields a node type does not have, naming them', () => {
    expect(check({ nodes: [{ id: 'x', type: 'transform', config: { value: 1, vaule: 2 } }], edges: [] })).toEqual([
      { field: 'nodes.0.config', message: 'unknown field(s) vaule' },
    ]);
  });

  it('reports a malformed expression where it is written', () => {
    const problems = check({ nodes: [t('x', { deep: ['ok', '{{ $sum( }}'] })], edges: [] });
    expect(problems).toHaveLength(1);
    expect(problems[0]!.field).toBe('nodes.0.config.value.deep.1');
  });

  it('asks a node that calls out for its connection', () => {
    expect(check({ nodes: [{ id: 'call', type: 'http_request', config: { method: 'GET', path: '/x' } }], edges: [] })).toEqual([
      { field: 'nodes.0.connection_id', message: 'a http_request node needs a connection_id' },
    ]);
    expect(check({ nodes: [{ id: 'call', type: 'http_request', connection_id: 4, config: { method: 'GET', path: '/x' } }], edges: [] })).toEqual([]);
  });

  it('refuses edges to nodes that do not exist, and duplicate edges', () => {
    expect(check({ nodes: [t('a'), t('b')], edges: [{ from: 'a', to: 'ghost' }] })).toEqual([{ field: 'edges.0.to', message: 'no node "ghost"' }]);
    expect(
      check({
        nodes: [t('a'), t('b')],
        edges: [
          { from: 'a', to: 'b' },
          { from: 'a', to: 'b' },
        ],
      }),
    ).toEqual([{ field: 'edges', message: 'duplicate edge a -> b' }]);
  });

  it('names the branches a source can take, and refuses branches on nodes without any', () => {
    const cond = { id: 'if', type: 'condition', config: { expression: true } };
    expect(check({ nodes: [cond, t('b')], edges: [{ from: 'if', to: 'b', branch: 'maybe' }] })).toEqual([
      { field: 'edges.0.branch', message: '"maybe" is not a branch of if (true, false)' },
    ]);
    expect(check({ nodes: [t('a'), t('b')], edges: [{ from: 'a', to: 'b', branch: 'true' }] })).toEqual([
      { field: 'edges.0.branch', message: 'transform nodes have no branches' },
    ]);
    // A switch's branches are its cases and `default`.
    const sw = { id: 'sw', type: 'switch', config: { value: 1, cases: ['red', 'blue'] } };
    expect(check({ nodes: [sw, t('b')], edges: [{ from: 'sw', to: 'b', branch: 'blue' }] })).toEqual([]);
    expect(check({ nodes: [sw, t('b')], edges: [{ from: 'sw', to: 'b', branch: 'green' }] })[0]!.message).toBe(
      '"green" is not a branch of sw (red, blue, default)',
    );
  });

  it('finds a cycle, and looks for one only once the edges are otherwise sound', () => {
    const ring = [
      { from: 'a', to: 'b' },
      { from: 'b', to: 'c' },
      { from: 'c', to: 'a' },
    ];
    const [problem, ...rest] = check({ nodes: [t('a'), t('b'), t('c')], edges: ring });
    expect(rest).toEqual([]);
    expect(problem!.field).toBe('edges');
    expect(problem!.message).toMatch(/^the graph has a cycle: /);
    expect(check({ nodes: [t('a'), t('b'), t('c')], edges: [...ring, { from: 'a', to: 'ghost' }] }).map((p) => p.field)).toEqual(['edges.3.to']);
  });

  it("checks a record_query's eql against its params when the eql holds no expression", () => {
    const query = (config: Record<string, unknown>) =>
      validateGraph({ nodes: [{ id: 'q', type: 'record_query', config: { entity: 'lead', ...config } }], edges: [] }, manual, nodeTypes);
    expect(query({ eql: 'a = :x and b in (:ys)', params: { x: '{{ trigger.x }}', ys: [1, 2] } })).toEqual([]);
    expect(query({ eql: "a = '{{ trigger.x }}'" })).toEqual([]);
    expect(query({ eql: '{{ trigger.filter }}', params: { anything: 1 } })).toEqual([]);
    expect(query({ eql: 'a = :x' })).toEqual([{ field: 'nodes.0.config.params', message: 'has no value for the parameter :x the eql uses' }]);
    expect(query({ eql: 'a = :x', params: { x: 1, y: 2 } }).map((p) => p.field)).toEqual(['nodes.0.config.params.y']);
    expect(query({ params: { x: 1 } }).map((p) => p.field)).toEqual(['nodes.0.config.params.x']);
    expect(query({ eql: 'a = ', params: {} })).toEqual([{ field: 'nodes.0.config.eql', message: expect.stringMatching(/expected a value .* at position 4/) }]);
  });

  it('accepts the schedules Temporal accepts (5 to 7 fields, @every, shorthands), and nothing else', () => {
    const schedule = (cron: string, timezone?: string) =>
      check({ nodes: [t('a')], edges: [] }, { type: 'schedule', config: { cron, overlap: 'skip', ...(timezone !== undefined ? { timezone } : {}) } });
    for (const cron of [
      '*/5 * * * *',
      '30 9 * * 1-5',
      '0 0 1 1 * 2030',
      '0 30 9 * * 1-5 *',
      '@daily',
      '@every 90s',
      '@every 1h/30m',
      ' @hourly ',
      'TZ=Europe/Paris 0 9 * * mon',
    ])
      expect(schedule(cron), cron).toEqual([]);
    // 6 fields end with a year (Temporal's reading), so a seconds-first line is refused: hour 30.
    for (const cron of [
      '* * * *',
      '@fortnightly',
      '',
      '0 30 9 * * 1-5',
      'x x x x x',
      '@every 0s',
      '99 99 99 99 99',
      '0 0 1 1 * 1999',
      'TZ=Not/AZone 0 0 * * *',
    ])
      expect(
        schedule(cron).map((p) => p.field),
        cron,
      ).toEqual(['trigger.config.cron']);
    expect(schedule('@daily', 'Not/AZone')).toEqual([{ field: 'trigger.config.timezone', message: expect.stringMatching(/unknown time zone Not\/AZone/) }]);
  });
});

describe('validateGraph: error branches and references', () => {
  const check = (graph: Graph) => validateGraph(graph, { type: 'manual', config: {} }, nodeTypes);
  const t = (id: string, config: Record<string, unknown> = { value: 1 }, extra: Record<string, unknown> = {}) => ({ id, type: 'transform', config, ...extra });

  it('accepts "error" edges from a node with on_error "branch", of any type', () => {
    const cond = { id: 'if', type: 'condition', config: { expression: true }, on_error: 'branch' as const };
    expect(
      check({
        nodes: [cond, t('yes'), t('oops', { value: '{{ nodes.if.error.message }}' })],
        edges: [
          { from: 'if', to: 'yes', branch: 'true' },
          { from: 'if', to: 'oops', branch: 'error' },
        ],
      }),
    ).toEqual([]);
    expect(check({ nodes: [t('pay', { value: 1 }, { on_error: 'branch' }), t('notify')], edges: [{ from: 'pay', to: 'notify', branch: 'error' }] })).toEqual(
      [],
    );
  });

  it('refuses "error" edges from nodes without on_error "branch", saying so', () => {
    expect(check({ nodes: [t('pay'), t('notify')], edges: [{ from: 'pay', to: 'notify', branch: 'error' }] })).toEqual([
      {
        field: 'edges.0.branch',
        message: '"error" edges leave only nodes with on_error "branch" (they carry its failure); pay has on_error "fail"',
      },
    ]);
  });

  it('asks a node with on_error "branch" for an error edge, and a switch for no case called "error"', () => {
    expect(check({ nodes: [t('pay', { value: 1 }, { on_error: 'branch' }), t('b')], edges: [{ from: 'pay', to: 'b' }] })).toEqual([
      { field: 'nodes.0.on_error', message: 'on_error "branch" needs at least one edge from pay with branch "error" (where its failure goes)' },
    ]);
    const sw = { id: 'sw', type: 'switch', config: { value: 1, cases: ['error'] }, on_error: 'branch' as const };
    expect(check({ nodes: [sw, t('b')], edges: [{ from: 'sw', to: 'b', branch: 'error' }] }).map((p) => p.field)).toEqual(['nodes.0.on_error']);
    // Without on_error "branch", a case called "error" is a case like any other.
    expect(check({ nodes: [{ ...sw, on_error: undefined }, t('b')], edges: [{ from: 'sw', to: 'b', branch: 'error' }] })).toEqual([]);
  });

  it('refuses a reference to a node that does not exist, naming it and where', () => {
    expect(check({ nodes: [t('a', { value: { x: 'id {{ nodes.nope.z }}' } })], edges: [] })).toEqual([
      { field: 'nodes.0.config.value.x', message: 'refers to node "nope" (nodes.nope), which does not exist in this workflow' },
    ]);
  });

  it('refuses a reference to a node that is not upstream, or to the node itself', () => {
    const problems = check({
      nodes: [t('a'), t('b', { value: '{{ nodes.c.x }}' }), t('c', { value: '{{ nodes.c.x + nodes.a.y }}' })],
      edges: [
        { from: 'a', to: 'b' },
        { from: 'a', to: 'c' },
      ],
    });
    expect(problems).toEqual([
      {
        field: 'nodes.1.config.value',
        message: 'node "b" refers to node "c", which is not upstream of it (no path of edges leads from c to b): it has no output when b runs',
      },
      { field: 'nodes.2.config.value', message: 'node "c" refers to its own output: it has no output when c runs' },
    ]);
    // Dynamic uses of `nodes` and fields named `nodes` elsewhere are left alone.
    expect(check({ nodes: [t('a', { value: '{{ $keys(nodes) & trigger.nodes.q }}' })], edges: [] })).toEqual([]);
  });
});

describe('validateGraph, for_each bodies', () => {
  const loop = (body: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    id: 'each',
    type: 'for_each',
    config: { items: '{{ trigger.list }}', body, ...extra },
  });
  const t = (id: string, value: unknown = 1) => ({ id, type: 'transform', config: { value } });
  const check = (nodes: unknown[], edges: { from: string; to: string }[] = []) => validateGraph({ nodes: nodes as never, edges }, manual, nodeTypes);

  it('accepts a body that names its item, index, its own upstream nodes and the nodes upstream of the loop', () => {
    const problems = check(
      [
        t('before'),
        loop({ nodes: [t('one', '{{ item.x + index }}'), t('two', '{{ nodes.one & nodes.before & trigger.y }}')], edges: [{ from: 'one', to: 'two' }] }),
      ],
      [{ from: 'before', to: 'each' }],
    );
    expect(problems).toEqual([]);
  });

  it('checks a body as a graph, at its place', () => {
    const fields = check([loop({ nodes: [t('a'), { id: 'b', type: 'nope' }, t('c', '{{ ( }}')], edges: [{ from: 'a', to: 'ghost' }] })]).map((p) => p.field);
    expect(fields).toEqual(
      expect.arrayContaining(['nodes.0.config.body.nodes.1.type', 'nodes.0.config.body.nodes.2.config.value', 'nodes.0.config.body.edges.0.to']),
    );
  });

  it('refuses ids used twice across the definition, and a reference to a body node from outside or a later body node', () => {
    const problems = check(
      [t('a'), loop({ nodes: [t('a'), t('b', '{{ nodes.c }}'), t('c')], edges: [{ from: 'b', to: 'c' }] }), t('after', '{{ nodes.b }}')],
      [{ from: 'each', to: 'after' }],
    );
    expect(problems.map((p) => p.field)).toEqual(
      expect.arrayContaining(['nodes.1.config.body.nodes.0.id', 'nodes.1.config.body.nodes.1.config.value', 'nodes.2.config.value']),
    );
  });

  it('needs output_node when the body has several sinks, refuses waits and approvals inside, and nesting deeper than four', () => {
    expect(check([loop({ nodes: [t('p'), t('q')] })])).toContainEqual({
      field: 'nodes.0.config.body.output_node',
      message: "the body has several sink nodes (p, q): name the one whose output is an item's result",
    });
    expect(check([loop({ nodes: [t('p'), t('q')], output_node: 'q' })])).toEqual([]);
    const wait = check([loop({ nodes: [{ id: 'w', type: 'wait_for_event', config: { event: 'paid', key: 'k', timeout_ms: 1000 } }] })]);
    expect(wait.map((p) => p.field)).toContain('nodes.0.config.body.nodes.0.type');
    let body: Record<string, unknown> = { nodes: [t('leaf')] };
    for (let depth = 4; depth >= 1; depth--) body = { nodes: [{ id: `l${depth}`, type: 'for_each', config: { items: [], body } }] };
    expect(check(body.nodes as unknown[]).map((p) => p.message)).toContain('for_each bodies nest at most 4 levels deep');
  });

  it('reports a body node that is not shaped as a node (null, a string) instead of failing on it', () => {
    expect(check([loop({ nodes: [null, 'x', t('a')], edges: [], output_node: 'a' })]).map((p) => p.field)).toEqual([
      'nodes.0.config.body.nodes.0',
      'nodes.0.config.body.nodes.1',
    ]);
  });

  it('needs a body or a workflow_id, not both', () => {
    expect(check([{ id: 'each', type: 'for_each', config: { items: [] } }]).map((p) => p.field)).toEqual(['nodes.0.config.body']);
    expect(check([loop({ nodes: [t('a')] }, { workflow_id: 3 })]).map((p) => p.field)).toEqual(['nodes.0.config.body']);
  });
});
