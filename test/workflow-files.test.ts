import { Ajv2020 } from 'ajv/dist/2020.js';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';

/**
 * Workflows as files against two real instances: A, where the workflows are written by hand, and
 * B, a second database with connections of the same labels (other ids) and the same users.
 */

const W = '/api/workflow/v1';
let a: TestApp;
let b: TestApp;
let editorA: TestUser;
type File = { path: string; content: string };

const connection = (app: TestApp, label: string) =>
  app.admin.post(`${W}/connections`, { type: 'http_bearer', label, cred: 'sk-test-0000', extra: { base_url: 'http://127.0.0.2:9' } });

const post = async (app: TestApp, path: string, body: unknown) => (await app.admin.post(`${W}${path}`, body)).body.data;

const byPath = (files: File[]) => Object.fromEntries(files.map((f) => [f.path, f.content]));
const actions = (plan: { changes: { slug: string; action: string }[] }) => Object.fromEntries(plan.changes.map((c) => [c.slug, c.action]));

async function exported(app: TestApp, query = ''): Promise<File[]> {
  const res = await app.admin.get(`${W}/export${query}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data.files;
}

beforeAll(async () => {
  [a, b] = await Promise.all([startTestApp({ worker: true }), startTestApp()]);
  editorA = await a.createUser('editor', 'eddie');
  await b.createUser('editor', 'eddie');
  // B gets a connection first, so that its "CRM" has another id than A's.
  await connection(b, 'Unrelated');
  const crmA = (await connection(a, 'CRM')).body.data.id;
  await connection(b, 'CRM');
  const child = await post(a, '/workflows', {
    title: 'Child',
    slug: 'child',
    tags: ['crm'],
    trigger: { type: 'manual' },
    nodes: [{ id: 'double', type: 'transform', config: { value: { doubled: '{{ trigger.n * 2 }}' } } }],
  });
  await post(a, '/workflows', {
    title: 'Parent',
    slug: 'parent',
    description: 'Calls the child\nand fetches a lead.',
    tags: ['crm'],
    trigger: { type: 'manual' },
    shared_with: [editorA.id],
    error_workflow_id: child.id,
    nodes: [
      { id: 'call', type: 'run_workflow', config: { workflow_id: child.id, payload: { n: '{{ trigger.n }}' } } },
      // Nothing listens there: the run goes on without it (partial).
      { id: 'fetch', type: 'http_request', connection_id: crmA, config: { method: 'GET', path: '/leads' }, retry: { max_attempts: 1 }, on_error: 'continue' },
      { id: 'out', type: 'transform', config: { value: { result: '{{ nodes.call.output.doubled }}' } } },
    ],
    edges: [{ from: 'call', to: 'out' }],
  });
  await post(a, '/workflows', {
    title: 'Nightly',
    slug: 'nightly',
    tags: ['crm'],
    status: 'active',
    trigger: { type: 'schedule', config: { cron: '0 3 * * *' } },
    nodes: [{ id: 'noop', type: 'transform', config: { value: 1 } }],
  });
}, 120_000);
afterAll(async () => Promise.all([a?.close(), b?.close()]));

describe('export', () => {
  it('writes one file per workflow with names instead of ids, the same bytes each time', async () => {
    const files = await exported(a);
    expect(files.map((f) => f.path)).toEqual(['child.yaml', 'nightly.yaml', 'parent.yaml']);
    expect(await exported(a)).toEqual(files);
    const parent = byPath(files)['parent.yaml']!;
    expect(parent).toMatch(/^# A workflow of the workflow service/);
    expect(parent).toContain('    type: run_workflow\n    config:\n      payload:\n        n: "{{ trigger.n }}"\n      workflow: child\n');
    expect(parent).toContain('    connection: CRM\n');
    expect(parent).toContain('shared_with:\n  - eddie\n');
    expect(parent).toContain('\nerror_workflow: child\n');
    expect(byPath(files)['child.yaml']).not.toContain('error_workflow');
    expect(parent).toContain('description: |-\n  Calls the child\n  and fetches a lead.\n');
    // No instance ids, versions or timestamps.
    expect(parent).not.toMatch(/_id:|version|created_at|updated_at|owner/);
    expect((await exported(a, '?tag=nothing')).length).toBe(0);
    expect((await exported(a, '?q=nightly')).map((f) => f.path)).toEqual(['nightly.yaml']);
  });

  it('shows another user only what they may see', async () => {
    const res = await editorA.client.get(`${W}/export`);
    expect(res.body.data.files.map((f: File) => f.path)).toEqual(['parent.yaml']);
  });
});

describe('the JSON Schema of a file', () => {
  it('is public, describes every exported file, and refuses ids where names belong', async () => {
    const res = await a.anonymous.get(`${W}/workflow.schema.json`);
    expect(res.status).toBe(200);
    const schema = res.body;
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    const validate = new Ajv2020({ strict: false, allErrors: true }).compile(schema);
    for (const file of await exported(a)) expect(validate(parse(file.content)), `${file.path}: ${JSON.stringify(validate.errors)}`).toBe(true);
    const withId = parse(byPath(await exported(a))['parent.yaml']!);
    withId.nodes[0].config.workflow_id = 3;
    expect(validate(withId)).toBe(false);
    expect(schema.$defs.RunWorkflowFileNodeConfig.properties.workflow).toMatchObject({ type: 'string' });
    expect(schema.$defs.WorkflowFile.properties.error_workflow).toBeDefined();
    // The OpenAPI document shows it as the content of a file's text.
    const doc = (await a.anonymous.get('/api/openapi.json')).body;
    expect(doc.components.schemas.WorkflowFileText.properties.content).toMatchObject({
      contentMediaType: 'application/yaml',
      contentSchema: { $ref: '#/components/schemas/WorkflowFile' },
    });
  });
});

describe('plan and apply on a second instance', () => {
  it('creates the set there, resolving labels, slugs and logins to its own ids, then plans everything unchanged', async () => {
    const files = await exported(a);
    const planned = await b.admin.post(`${W}/plan`, { files });
    expect(planned.status, planned.text).toBe(200);
    expect(actions(planned.body.data)).toEqual({ child: 'create', nightly: 'create', parent: 'create' });
    expect(planned.body.data.changes.find((c: { slug: string }) => c.slug === 'child')).toMatchObject({
      id: null,
      diff: expect.stringContaining('--- /dev/null\n+++ b/child.yaml\n'),
    });
    // A plan changes nothing.
    expect((await b.admin.get(`${W}/workflows`)).body.data.total).toBe(0);

    const applied = await b.admin.post(`${W}/apply`, { files, plan_hash: planned.body.data.plan_hash });
    expect(applied.status, applied.text).toBe(200);
    expect(applied.body.data.warnings).toEqual([]);
    const ids = Object.fromEntries(applied.body.data.changes.map((c: { slug: string; id: number }) => [c.slug, c.id]));
    const parent = (await b.admin.get(`${W}/workflows/${ids.parent}`)).body.data;
    const [crmB] = await b.sql<{ id: number }>(`select id from connections where label = 'CRM'`);
    const [edB] = await b.sql<{ id: number }>(`select id from users where login = 'eddie'`);
    expect(parent.nodes.find((n: { id: string }) => n.id === 'fetch').connection_id).toBe(crmB!.id);
    expect(parent.nodes.find((n: { id: string }) => n.id === 'call').config.workflow_id).toBe(ids.child);
    expect(parent.shared_with).toEqual([edB!.id]);
    expect(parent.error_workflow_id).toBe(ids.child);

    const again = await b.admin.post(`${W}/plan`, { files });
    expect(Object.values(actions(again.body.data))).toEqual(['unchanged', 'unchanged', 'unchanged']);
    expect(again.body.data.changes.every((c: { diff: string }) => c.diff === '')).toBe(true);
    // Same state, same bytes: B exports exactly what A did.
    expect(await exported(b)).toEqual(files);
  });

  it('follows an active schedule trigger with its Temporal schedule after the commit', async () => {
    const [row] = await b.sql<{ id: number; status: string }>(`select id, status from workflows where slug = 'nightly'`);
    expect(row!.status).toBe('active');
    const { temporal } = b.stack.services;
    const described = await temporal.client.schedule.getHandle(temporal.scheduleId(row!.id)).describe();
    expect(described.state.paused).toBe(false);
  });

  it('answers an edited file with one update whose diff shows the change; applying twice changes nothing', async () => {
    const files = (await exported(b)).map((f) => (f.path === 'child.yaml' ? { ...f, content: f.content.replace('title: Child', 'title: Child, doubled') } : f));
    const plan = (await b.admin.post(`${W}/plan`, { files })).body.data;
    expect(actions(plan)).toEqual({ child: 'update', nightly: 'unchanged', parent: 'unchanged' });
    const diff = plan.changes.find((c: { slug: string }) => c.slug === 'child').diff;
    expect(diff).toContain('--- a/child.yaml\n+++ b/child.yaml\n');
    expect(diff).toContain('\n-title: Child\n+title: Child, doubled\n');
    expect(diff.split('\n').filter((l: string) => /^[-+][^-+]/.test(l))).toHaveLength(2);

    const [before] = await b.sql<{ version: number }>(`select version from workflows where slug = 'child'`);
    const first = await b.admin.post(`${W}/apply`, { files });
    expect(actions(first.body.data).child).toBe('update');
    const second = await b.admin.post(`${W}/apply`, { files });
    expect(Object.values(actions(second.body.data))).toEqual(['unchanged', 'unchanged', 'unchanged']);
    const [after] = await b.sql<{ version: number; title: string }>(`select version, title from workflows where slug = 'child'`);
    expect(after).toEqual({ version: before!.version + 1, title: 'Child, doubled' });
  });

  it('refuses a stale plan and changes nothing', async () => {
    const files = (await exported(b)).map((f) =>
      f.path === 'child.yaml' ? { ...f, content: f.content.replace('title: Child, doubled', 'title: Child again') } : f,
    );
    const plan = (await b.admin.post(`${W}/plan`, { files })).body.data;
    const [child] = await b.sql<{ id: number }>(`select id from workflows where slug = 'child'`);
    // Someone changes the workflow between the plan and its apply.
    await b.admin.patch(`${W}/workflows/${child!.id}`, { description: 'edited by hand' });
    const stale = await b.admin.post(`${W}/apply`, { files, plan_hash: plan.plan_hash });
    expect(stale.status).toBe(409);
    expect(stale.body.error).toBe('plan_stale');
    const [row] = await b.sql<{ title: string; description: string }>(`select title, description from workflows where slug = 'child'`);
    expect(row).toEqual({ title: 'Child, doubled', description: 'edited by hand' });
    // Files edited after the plan are refused the same way.
    const replanned = (await b.admin.post(`${W}/plan`, { files })).body.data;
    const edited = files.map((f) => (f.path === 'nightly.yaml' ? { ...f, content: f.content.replace('title: Nightly', 'title: Nightly!') } : f));
    expect((await b.admin.post(`${W}/apply`, { files: edited, plan_hash: replanned.plan_hash })).body.error).toBe('plan_stale');
    expect((await b.admin.post(`${W}/apply`, { files, plan_hash: replanned.plan_hash })).status).toBe(200);
  });

  it('archives a workflow whose file is missing only with prune, and only within the tag', async () => {
    const other = await post(b, '/workflows', {
      title: 'Other tag',
      slug: 'other',
      tags: ['ops'],
      trigger: { type: 'manual' },
      nodes: [{ id: 'x', type: 'transform', config: { value: 1 } }],
    });
    const files = (await exported(b, '?tag=crm')).filter((f) => f.path !== 'nightly.yaml');
    const kept = (await b.admin.post(`${W}/apply`, { files, tag: 'crm' })).body.data;
    expect(actions(kept)).toEqual({ child: 'unchanged', parent: 'unchanged' });
    const [nightly] = await b.sql<{ status: string }>(`select status from workflows where slug = 'nightly'`);
    expect(nightly!.status).toBe('active');

    const plan = (await b.admin.post(`${W}/plan`, { files, tag: 'crm', prune: true })).body.data;
    expect(actions(plan)).toEqual({ child: 'unchanged', nightly: 'archive', parent: 'unchanged' });
    expect(plan.changes.find((c: { slug: string }) => c.slug === 'nightly').diff).toContain('+++ /dev/null\n@@ -1,');
    const applied = await b.admin.post(`${W}/apply`, { files, tag: 'crm', prune: true, plan_hash: plan.plan_hash });
    expect(applied.status, applied.text).toBe(200);
    const statuses = Object.fromEntries((await b.sql<{ slug: string; status: string }>('select slug, status from workflows')).map((r) => [r.slug, r.status]));
    expect(statuses).toEqual({ child: 'inactive', parent: 'inactive', nightly: 'archived', other: 'inactive' });
    const { temporal } = b.stack.services;
    const [row] = await b.sql<{ id: number }>(`select id from workflows where slug = 'nightly'`);
    expect((await temporal.client.schedule.getHandle(temporal.scheduleId(row!.id)).describe()).state.paused).toBe(true);

    // Without a tag, prune's scope is every workflow the caller owns: the plan shows it.
    const everything = (await b.admin.post(`${W}/plan`, { files, prune: true })).body.data;
    expect(actions(everything).other).toBe('archive');
    expect(other.id).toBeGreaterThan(0);
    // A prune with no files at all is refused rather than archiving everything.
    const empty = await b.admin.post(`${W}/plan`, { files: [], prune: true });
    expect(empty.status).toBe(400);
    expect(empty.body.data.errors[0]).toMatchObject({ field: 'files' });
  });

  it('brings an archived workflow back from its file', async () => {
    const files = await exported(a, '?tag=crm');
    const applied = (
      await b.admin.post(`${W}/apply`, { files: files.map((f) => ({ ...f, content: f.content.replace('title: Child\n', 'title: Child, doubled\n') })) })
    ).body.data;
    expect(actions(applied).nightly).toBe('update');
    expect(applied.changes.find((c: { slug: string }) => c.slug === 'nightly').diff).toContain('-status: archived\n+status: active\n');
    const [row] = await b.sql<{ status: string }>(`select status from workflows where slug = 'nightly'`);
    expect(row!.status).toBe('active');
  });

  it('applies nothing when one file among valid ones is invalid, and lists every problem with its file and field', async () => {
    const files = await exported(b, '?tag=crm');
    const edited = files.map((f) => {
      if (f.path === 'child.yaml') return { ...f, content: f.content.replace('title: Child, doubled', 'title: Child, tripled') };
      if (f.path === 'parent.yaml') return { ...f, content: f.content.replace('connection: CRM', 'connection: Nowhere').replace('to: out', 'to: nope') };
      return f;
    });
    edited.push({ path: 'broken.yaml', content: 'slug: broken\ntitle: [unclosed\n' });
    edited.push({ path: 'no-slug.yaml', content: 'title: No slug\ntrigger: {type: manual}\nnodes:\n  - {id: x, type: transform, config: {value: 1}}\n' });
    edited.push({
      path: 'bad-ref.yaml',
      content: 'slug: bad-ref\ntitle: Bad\ntrigger: {type: manual}\nnodes:\n  - {id: c, type: run_workflow, config: {workflow: missing}}\n',
    });
    const res = await b.admin.post(`${W}/apply`, { files: edited });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('validation_failed');
    const problems = res.body.data.errors.map((e: { file: string; field: string }) => `${e.file} ${e.field}`);
    expect(problems).toEqual(
      expect.arrayContaining([
        'broken.yaml ',
        'no-slug.yaml slug',
        'parent.yaml nodes.1.connection',
        'parent.yaml edges.0.to',
        'bad-ref.yaml nodes.0.config.workflow',
      ]),
    );
    expect(res.body.data.errors.find((e: { field: string }) => e.field === 'nodes.1.connection')).toMatchObject({ line: expect.any(Number) });
    const [child] = await b.sql<{ title: string }>(`select title from workflows where slug = 'child'`);
    expect(child!.title).toBe('Child, doubled');
    expect(await b.sql(`select 1 from workflows where slug in ('broken', 'bad-ref')`)).toEqual([]);

    // A graph error is found by the same checks as create and PATCH, on plan too.
    const graph = files.map((f) => (f.path === 'parent.yaml' ? { ...f, content: f.content.replace('to: out', 'to: nope') } : f));
    const planned = await b.admin.post(`${W}/plan`, { files: graph });
    expect(planned.status).toBe(400);
    expect(planned.body.data.errors).toEqual([expect.objectContaining({ file: 'parent.yaml', field: 'edges.0.to', message: 'no node "nope"' })]);
  });

  it('refuses instance ids, ambiguous labels, unknown logins, and a slug taken by a workflow the caller cannot see', async () => {
    await connection(b, 'Twin');
    await connection(b, 'Twin');
    const content = (node: string, extra = '') => `slug: refs\ntitle: Refs\ntrigger: {type: manual}\n${extra}nodes:\n  - ${node}\n`;
    const problems = async (files: File[], client = b.admin) => {
      const res = await client.post(`${W}/plan`, { files });
      expect(res.status, res.text).toBe(400);
      return res.body.data.errors.map((e: { field: string; message: string }) => `${e.field}: ${e.message}`);
    };
    expect(await problems([{ path: 'refs.yaml', content: content('{id: f, type: http_request, connection_id: 1, config: {method: GET, path: /}}') }])).toEqual([
      expect.stringMatching(/^nodes\.0\.connection_id: a file names connections by label/),
    ]);
    expect(await problems([{ path: 'refs.yaml', content: content('{id: f, type: http_request, connection: Twin, config: {method: GET, path: /}}') }])).toEqual([
      expect.stringMatching(/^nodes\.0\.connection: 2 connections labelled "Twin"/),
    ]);
    expect(await problems([{ path: 'refs.yaml', content: content('{id: f, type: transform, config: {value: 1}}', 'shared_with: [nobody]\n') }])).toEqual([
      'shared_with.0: no user with login nobody',
    ]);
    const editor = await b.createUser('editor');
    const taken = await problems(
      [{ path: 'child.yaml', content: content('{id: f, type: transform, config: {value: 1}}').replace('slug: refs', 'slug: child') }],
      editor.client,
    );
    expect(taken).toEqual(['slug: the slug child is taken by a workflow you cannot see']);
  });

  it('keeps the server status when the file has none, and applies the one it has', async () => {
    const [nightly] = (await exported(b, '?q=nightly')).map((f) => ({ ...f, content: f.content.replace('status: active\n', '') }));
    expect(actions((await b.admin.post(`${W}/plan`, { files: [nightly] })).body.data)).toEqual({ nightly: 'unchanged' });
    const inactive = { ...nightly!, content: nightly!.content.replace('title: Nightly', 'status: inactive\ntitle: Nightly') };
    const applied = (await b.admin.post(`${W}/apply`, { files: [inactive] })).body.data;
    expect(applied.changes[0]).toMatchObject({ action: 'update', diff: expect.stringContaining('-status: active\n+status: inactive\n') });
    const [row] = await b.sql<{ status: string; version: number }>(`select status, version from workflows where slug = 'nightly'`);
    expect(row!.status).toBe('inactive');
  });
});

describe('a purged workflow', () => {
  it('comes back from its file with the same slug, and runs', async () => {
    const files = await exported(a);
    const [child] = await a.sql<{ id: number }>(`select id from workflows where slug = 'child'`);
    expect((await a.admin.delete(`${W}/workflows/${child!.id}`)).status).toBe(200);
    expect((await a.admin.delete(`${W}/workflows/${child!.id}?force=true`)).body.data.status).toBe('purged');

    const plan = (await a.admin.post(`${W}/plan`, { files })).body.data;
    expect(actions(plan)).toEqual({ child: 'create', nightly: 'unchanged', parent: 'update' });
    // The parent's stored reference names a workflow that no longer exists: it shows as an id.
    expect(plan.changes.find((c: { slug: string }) => c.slug === 'parent').diff).toMatch(/-\s+workflow_id: \d+\n\+\s+workflow: child\n/);
    const applied = (await a.admin.post(`${W}/apply`, { files, plan_hash: plan.plan_hash })).body.data;
    const ids = Object.fromEntries(applied.changes.map((c: { slug: string; id: number }) => [c.slug, c.id]));
    expect(ids.child).not.toBe(child!.id);

    const run = await a.admin.post(`${W}/workflows/${ids.parent}/run?wait=true`, { payload: { n: 21 } });
    expect(run.status, run.text).toBe(200);
    expect(run.body.data).toMatchObject({ status: 'partial' });
    const execution = (await a.admin.get(`/api/workflow/v1/executions/${run.body.data.execution_id}`)).body.data;
    const out = execution.timeline.find((t: { node_id: string }) => t.node_id === 'out');
    expect(out.output).toEqual({ result: 42 });
  });
});

describe('acting for the caller', () => {
  it('gives an editor the rights of create and PATCH, no more', async () => {
    await post(a, '/workflows', {
      title: 'Shared one',
      slug: 'shared-one',
      trigger: { type: 'manual' },
      shared_with: [editorA.id],
      nodes: [{ id: 'x', type: 'transform', config: { value: 1 } }],
    });
    const files: File[] = (await editorA.client.get(`${W}/export`)).body.data.files;
    expect(files.map((f) => f.path)).toEqual(['parent.yaml', 'shared-one.yaml']);
    const problems = async (edited: File[]) => {
      const res = await editorA.client.post(`${W}/apply`, { files: edited });
      expect(res.status, res.text).toBe(400);
      return res.body.data.errors;
    };
    // The parent is shared with the editor, but neither its child workflow nor its connection is:
    // the export shows the child as an id (a name would tell what the editor may not see), and a
    // change is refused on both counts.
    const parent = files.find((f) => f.path === 'parent.yaml')!;
    expect(parent.content).toMatch(/ {6}workflow_id: \d+\n/);
    const refused = await problems([{ ...parent, content: parent.content.replace('title: Parent', 'title: Parent, by the editor') }]);
    expect(refused.find((p: { field: string }) => p.field === 'error_workflow_id')).toMatchObject({ message: expect.stringContaining('by slug, not by id') });
    expect(refused.filter((p: { field: string }) => p.field !== 'error_workflow_id')).toEqual([
      expect.objectContaining({ file: 'parent.yaml', field: 'nodes.0.config.workflow_id', message: expect.stringContaining('by slug, not by id') }),
      expect.objectContaining({
        file: 'parent.yaml',
        field: 'nodes.1.connection',
        message: `no connection labelled "CRM" that you and the workflow's owner may use`,
      }),
    ]);
    // Whom a workflow is shared with is its owner's choice.
    const shared = files.find((f) => f.path === 'shared-one.yaml')!;
    const unshared = await problems([{ ...shared, content: shared.content.replace(/shared_with:\n {2}- eddie\n/, '') }]);
    expect(unshared).toEqual([expect.objectContaining({ file: 'shared-one.yaml', message: expect.stringContaining("Only the workflow's owner") })]);
    // Without a tag, prune reaches only the caller's own workflows: the administrator's stay.
    const mine = { path: 'mine.yaml', content: 'slug: mine\ntitle: Mine\ntrigger: {type: manual}\nnodes:\n  - {id: x, type: transform, config: {value: 1}}\n' };
    const applied = await editorA.client.post(`${W}/apply`, { files: [mine], prune: true });
    expect(applied.status, applied.text).toBe(200);
    expect(actions(applied.body.data)).toEqual({ mine: 'create' });
    const [row] = await a.sql<{ owner_id: number }>(`select owner_id from workflows where slug = 'mine'`);
    expect(row!.owner_id).toBe(editorA.id);
    expect((await a.sql(`select 1 from workflows where status = 'archived'`)).length).toBe(0);
    // A subscriber plans nothing.
    const subscriber = await a.createUser('subscriber');
    expect((await subscriber.client.post(`${W}/plan`, { files: [mine] })).status).toBe(403);
  });
});
