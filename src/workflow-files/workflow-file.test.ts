import { describe, expect, it } from 'vitest';
import { fileFieldOf, idsForNames, mentionedIds, mentionedNames, namesForIds, type IdOf, type NameOf } from './references.js';
import { canonicalFile, parseFile, renderFile } from './workflow-file.js';

const connections = new Map([
  [3, 'CRM'],
  [4, 'Chat'],
]);
const workflows = new Map([
  [10, 'child'],
  [11, 'on-failure'],
]);
const users = new Map([
  [2, 'alice'],
  [5, 'bob'],
]);
const tables = { connection: connections, workflow: workflows, user: users };
const nameOf: NameOf = (kind, id) => tables[kind].get(id);
const idOf: IdOf = (kind, name) => {
  for (const [id, n] of tables[kind]) if (n === name) return id;
  return { problem: `no ${kind} ${name}` };
};

/** A stored definition naming everything the table knows, an inline body included. */
const stored = () => ({
  slug: 'parent',
  title: 'Parent',
  status: 'active',
  trigger: { type: 'manual', config: {} },
  shared_with: [5, 2],
  error_workflow_id: 11,
  nodes: [
    { id: 'fetch', type: 'http_request', connection_id: 3, config: { method: 'GET', path: '/x', body: { workflow_id: 99, connection_id: 1 } } },
    { id: 'call', type: 'run_workflow', config: { workflow_id: 10, payload: { a: 1 } } },
    {
      id: 'each',
      type: 'for_each',
      config: {
        items: '{{ nodes.fetch.body }}',
        body: {
          nodes: [
            { id: 'inner', type: 'http_request', connection_id: 3, config: { method: 'POST', path: '/y' } },
            { id: 'ask', type: 'approval', config: { approvers: { users: ['alice'] }, notify: { connection_id: 4, path: '/hook' } } },
            { id: 'again', type: 'run_workflow', config: { workflow_id: 10 } },
          ],
          edges: [{ from: 'inner', to: 'ask' }],
        },
      },
    },
  ],
  edges: [
    { from: 'fetch', to: 'call' },
    { from: 'call', to: 'each' },
  ],
});

describe('the reference table', () => {
  it('names every connection, workflow and user of a definition, inline bodies included, and leaves data alone', () => {
    const file = namesForIds(stored(), nameOf) as any;
    expect(file.shared_with).toEqual(['bob', 'alice']);
    expect(file.error_workflow).toBe('on-failure');
    expect(file.error_workflow_id).toBeUndefined();
    expect(file.nodes[0]).toMatchObject({ connection: 'CRM' });
    expect(file.nodes[0].connection_id).toBeUndefined();
    // An http_request body is the request's data, not a reference.
    expect(file.nodes[0].config.body).toEqual({ workflow_id: 99, connection_id: 1 });
    expect(file.nodes[1].config).toEqual({ workflow: 'child', payload: { a: 1 } });
    const body = file.nodes[2].config.body;
    expect(body.nodes[0]).toMatchObject({ connection: 'CRM' });
    expect(body.nodes[1].config).toEqual({ approvers: { users: ['alice'] }, notify: { connection: 'Chat', path: '/hook' } });
    expect(body.nodes[2].config).toEqual({ workflow: 'child' });
    expect(mentionedNames(file)).toEqual({
      connection: new Set(['CRM', 'Chat']),
      workflow: new Set(['on-failure', 'child']),
      user: new Set(['bob', 'alice']),
    });
    expect(mentionedIds(stored())).toEqual({ connection: new Set([3, 4]), workflow: new Set([11, 10]), user: new Set([5, 2]) });
  });

  it('turns a file back into the same definition', () => {
    const file = namesForIds(stored(), nameOf);
    const { definition, problems } = idsForNames(file, idOf);
    expect(problems).toEqual([]);
    expect(definition).toEqual(stored());
  });

  it('keeps an id it cannot name, and a file with an id is refused where a name belongs', () => {
    const file = namesForIds({ ...stored(), error_workflow_id: 77 }, nameOf) as any;
    expect(file.error_workflow_id).toBe(77);
    file.nodes[2].config.body.nodes[0].connection_id = 3;
    delete file.nodes[2].config.body.nodes[0].connection;
    const { problems } = idsForNames(file, idOf);
    expect(problems.map((p) => p.field)).toEqual(['error_workflow_id', 'nodes.2.config.body.nodes.0.connection_id']);
    expect(problems[1]!.message).toContain('by label');
  });

  it('reports every name that resolves to nothing, with its field', () => {
    const file = namesForIds(stored(), nameOf) as any;
    file.nodes[0].connection = 'Nope';
    file.nodes[2].config.body.nodes[1].config.approvers.users = ['alice', 'mallory'];
    file.shared_with = ['zed'];
    const { problems } = idsForNames(file, idOf);
    expect(problems).toEqual([
      { field: 'shared_with.0', message: 'no user zed' },
      { field: 'nodes.0.connection', message: 'no connection Nope' },
      { field: 'nodes.2.config.body.nodes.1.config.approvers.users.1', message: 'no user mallory' },
    ]);
  });

  it('prefers the id a place holds now when a name fits several', () => {
    const ambiguous: IdOf = (kind, name, hint) => (kind === 'connection' ? (hint.current ?? { problem: `${name} is ambiguous` }) : idOf(kind, name, hint));
    const file = namesForIds(stored(), nameOf);
    const current = { ...stored(), nodes: stored().nodes.map((n) => (n.id === 'fetch' ? { ...n, connection_id: 8 } : n)) };
    const { definition, problems } = idsForNames(file, ambiguous, current);
    expect((definition.nodes as any)[0].connection_id).toBe(8);
    // The inner body's node is matched by id inside the body of the node with the same id.
    expect((definition.nodes as any)[2].config.body.nodes[0].connection_id).toBe(3);
    expect((definition.nodes as any)[2].config.body.nodes[1].config.notify.connection_id).toBe(4);
    expect(problems).toEqual([]);
    // Without a stored definition, every place of the ambiguous kind is a problem.
    expect(idsForNames(file, ambiguous).problems.map((p) => p.field)).toEqual([
      'nodes.0.connection',
      'nodes.2.config.body.nodes.0.connection',
      'nodes.2.config.body.nodes.1.config.notify.connection',
    ]);
  });

  it('maps the fields of problems found in the stored definition to the file', () => {
    expect(fileFieldOf('nodes.2.connection_id')).toBe('nodes.2.connection');
    expect(fileFieldOf('nodes.0.config.workflow_id')).toBe('nodes.0.config.workflow');
    expect(fileFieldOf('nodes.0.config.body.nodes.1.config.notify.connection_id')).toBe('nodes.0.config.body.nodes.1.config.notify.connection');
    expect(fileFieldOf('error_workflow_id')).toBe('error_workflow');
    expect(fileFieldOf('shared_with.1')).toBe('shared_with.1');
    expect(fileFieldOf('nodes.1.config.value.connection_id.x')).toBe('nodes.1.config.value.connection_id.x');
  });
});

describe('workflow files', () => {
  const file = () => namesForIds(stored(), nameOf);

  it('are byte-stable: the same workflow gives the same bytes, whatever the order of its keys', () => {
    const text = renderFile(file());
    const shuffled = JSON.parse(
      JSON.stringify(file(), (_k, v) => (v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).reverse()) : v)),
    );
    expect(renderFile(shuffled)).toBe(text);
    expect(renderFile(parseFile('p.yaml', text).value!)).toBe(text);
    expect(text.startsWith('# A workflow of the workflow service')).toBe(true);
    const body = text.split('\n').filter((l) => !l.startsWith('#') && l);
    expect(body.slice(0, 8)).toEqual([
      'slug: parent',
      'title: Parent',
      'status: active',
      'trigger:',
      '  type: manual',
      'error_workflow: on-failure',
      'shared_with:',
      '  - alice',
    ]);
    expect(text).toContain('  - id: fetch\n    type: http_request\n    connection: CRM\n    config:\n');
    expect(text).toContain('          - id: inner\n            type: http_request\n            connection: CRM\n');
  });

  it('leave out what equals the default and keep strings that look like other types as strings', () => {
    const text = renderFile({ ...file(), description: '', tags: [], edges: [{ from: 'a', to: 'b', branch: 'true' }] });
    expect(text).not.toContain('description');
    expect(text).not.toContain('tags');
    expect(text).toContain('branch: "true"');
    expect(parseFile('x.yaml', text).value!.edges).toEqual([{ from: 'a', to: 'b', branch: 'true' }]);
    expect(canonicalFile({ slug: 's', trigger: { type: 'manual', config: {} }, nodes: [{ id: 'a', type: 'transform', config: {} }] })).toEqual({
      slug: 's',
      trigger: { type: 'manual' },
      nodes: [{ id: 'a', type: 'transform' }],
    });
  });

  it('keep multi-line strings readable', () => {
    const text = renderFile({ slug: 's', title: 't', description: 'Line one\nLine two', trigger: { type: 'manual' }, nodes: [] });
    expect(text).toContain('description: |-\n  Line one\n  Line two\n');
  });

  it('are read strictly: syntax errors with their line, duplicate keys, aliases beyond a few, a top level that is not a mapping', () => {
    expect(parseFile('a.yaml', 'slug: a\ntitle: [unclosed\n').problems[0]).toMatchObject({ file: 'a.yaml', field: '', line: expect.any(Number) });
    expect(parseFile('b.yaml', 'slug: a\nslug: b\n').problems[0]!.message).toMatch(/unique/i);
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 30 }, (_, i) => `b${i}: *a`)].join('\n');
    expect(parseFile('c.yaml', bomb).problems[0]!.message).toMatch(/alias/i);
    expect(parseFile('d.yaml', '- a\n- b\n').problems[0]!.message).toContain('one mapping');
    expect(parseFile('e.yaml', '{"slug": "json-too", "nodes": []}').value).toEqual({ slug: 'json-too', nodes: [] });
    expect(parseFile('f.yaml', 'a: !custom x\n').problems).not.toEqual([]);
  });

  it('are refused before parsing when they nest deeper than any workflow does', () => {
    for (const text of [
      'a: ' + '['.repeat(10_000) + ']'.repeat(10_000),
      Array.from({ length: 3000 }, (_, i) => `${' '.repeat(i)}k:`).join('\n'),
      `a:\n  ${'- '.repeat(5000)}x\n`,
    ]) {
      expect(parseFile('deep.yaml', text).problems[0]!.message).toContain('nests deeper than');
    }
    // Brackets in strings and deep but sane files are fine.
    const sane = renderFile(namesForIds(stored(), nameOf));
    expect(parseFile('ok.yaml', sane).problems).toEqual([]);
    expect(parseFile('ok.yaml', 'a: "{{ $map(x, function($v){ {\\"a\\": [$v]} }) }}"\n').problems).toEqual([]);
  });

  it('say on which line a field is', () => {
    const parsed = parseFile('p.yaml', renderFile(file()));
    const text = renderFile(file()).split('\n');
    expect(text[parsed.lineOf('nodes.1.config.workflow')! - 1]).toContain('workflow: child');
    // A field that is not in the file: the line of the closest one that is.
    expect(text[parsed.lineOf('nodes.1.config.nothing')! - 1]).toContain('config:');
  });
});
