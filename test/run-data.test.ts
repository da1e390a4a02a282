import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runTool } from '../src/agent/agent.tools.js';
import type { Principal } from '../src/auth/auth.service.js';
import { startTestApp, type TestApp, type TestUser } from './helpers/app.js';
import { eventually } from './helpers/http-target.js';

/**
 * Whose data a person sees. A run's inputs and outputs were computed with the rights of the
 * people it acted for: only they (and administrators) see them. Others the workflow is shared
 * with see what happened (status, nodes, times, attempts, error codes), not the data. Writing a
 * record one may not view answers only its uuid. Tried as an editor would against an
 * administrator's workflow and records.
 */
let app: TestApp;
let alice: TestUser; // editor the administrator's workflow is shared with
let bob: TestUser; // editor
let sharedId: number;
let adminRun: number;
const W = '/api/workflow/v1';
const M = '/api/management/v1';
const SECRET = 'the admin-only secret';
const PAYLOAD_SECRET = 'an admin-only payload';

const principalOf = (user: TestUser, role: 'editor' | 'administrator' = 'editor'): Principal =>
  app.stack.services.auth.principal({ id: user.id, login: user.login, role }, 'app_password');

beforeAll(async () => {
  app = await startTestApp({ worker: true });
  alice = await app.createUser('editor', 'alice');
  bob = await app.createUser('editor', 'bob');
  const vault = await app.admin.post(`${M}/entities`, {
    slug: 'vault',
    name: 'Vault',
    schema: { fields: { secret: { type: 'string' } } },
    capabilities: { view: 'svc_manage_entities', create: 'svc_manage_entities', edit: 'svc_manage_entities', delete: 'svc_manage_entities' },
  });
  expect(vault.status, vault.text).toBe(201);
  expect((await app.admin.post(`${M}/records/vault`, { secret: SECRET })).status).toBe(201);
  const created = await app.admin.post(`${W}/workflows`, {
    title: 'reads the vault',
    trigger: { type: 'manual' },
    shared_with: [alice.id],
    nodes: [
      { id: 'read', type: 'record_query', config: { entity: 'vault' } },
      { id: 'echo', type: 'transform', config: { value: { got: '{{ trigger.note }}', first: '{{ nodes.read.items[0].secret }}' } } },
      { id: 'boom', type: 'fail', config: { message: 'failing with {{ nodes.read.items[0].secret }}', code: 'vault_read' }, on_error: 'continue' },
    ],
    edges: [
      { from: 'read', to: 'echo' },
      { from: 'echo', to: 'boom' },
    ],
  });
  expect(created.status, created.text).toBe(201);
  sharedId = created.body.data.id;
  const run = await app.admin.post(`${W}/workflows/${sharedId}/run?wait=true&timeout_ms=90000`, { payload: { note: PAYLOAD_SECRET } });
  expect(run.body.data.status, run.text).toBe('partial');
  adminRun = run.body.data.execution_id;
});
afterAll(async () => {
  await app?.close();
});

const view = async (client: TestUser['client'] | TestApp['admin'], id: number) => {
  const res = await client.get(`${W}/executions/${id}`);
  expect(res.status, res.text).toBe(200);
  return res.body.data;
};

const settled = (id: number) =>
  eventually(
    async () => {
      const v = await view(app.admin, id);
      return v.status !== 'running' ? v : undefined;
    },
    90_000,
    `execution ${id} to end`,
  );

/** An administrator's workflow, shared with Alice, that fails with what it read from the vault. */
const vaultFailure = (title: string) =>
  app.admin.post(`${W}/workflows`, {
    title,
    trigger: { type: 'manual' },
    shared_with: [alice.id],
    nodes: [
      { id: 'read', type: 'record_query', config: { entity: 'vault' } },
      { id: 'boom', type: 'fail', config: { message: 'failing with {{ nodes.read.items[0].secret }}', code: 'vault_read' } },
    ],
    edges: [{ from: 'read', to: 'boom' }],
  });

/** A failed execution once its error workflow's run is linked to it. */
const failedAndHandled = (id: number) =>
  eventually(
    async () => {
      const v = await view(app.admin, id);
      return v.error_workflow_execution_id ? v : undefined;
    },
    90_000,
    'the error workflow to start',
  );

describe("a run's data", () => {
  it('is shown to the people it acted for and to administrators', async () => {
    const mine = await view(app.admin, adminRun);
    expect(mine.redacted).toBe(false);
    expect(mine.trigger_payload).toEqual({ note: PAYLOAD_SECRET });
    expect(JSON.stringify(mine.timeline)).toContain(SECRET);
    expect(mine.timeline.find((t: any) => t.node_id === 'boom').error).toEqual({ code: 'vault_read', message: `failing with ${SECRET}` });
  });

  it("is withheld from others the workflow is shared with: they see the run's shape, not the owner's outputs", async () => {
    const shared = await view(alice.client, adminRun);
    expect(shared.redacted).toBe(true);
    expect(JSON.stringify(shared)).not.toContain(SECRET);
    expect(JSON.stringify(shared)).not.toContain(PAYLOAD_SECRET);
    expect(shared).toMatchObject({ id: adminRun, workflow_id: sharedId, status: 'partial', trigger: 'manual', trigger_payload: null, output: null });
    expect(shared.timeline.map((t: any) => [t.node_id, t.node_type, t.status, t.attempts, t.input, t.output])).toEqual([
      ['read', 'record_query', 'success', 1, null, null],
      ['echo', 'transform', 'success', 1, null, null],
      ['boom', 'fail', 'failed', 1, null, null],
    ]);
    const boom = shared.timeline.find((t: any) => t.node_id === 'boom');
    expect(boom.error.code).toBe('vault_read');
    expect(boom.started_at).not.toBeNull();
    // Someone it is not shared with does not see it at all.
    expect((await bob.client.get(`${W}/executions/${adminRun}`)).status).toBe(404);
  });

  it("is the editor's own in her own run of the shared workflow, which runs with her rights", async () => {
    const run = await alice.client.post(`${W}/workflows/${sharedId}/run?wait=true&timeout_ms=90000`, { payload: { note: 'alice note' } });
    expect(run.status, run.text).toBe(200);
    expect(run.body.data.redacted).toBe(false);
    const own = await view(alice.client, run.body.data.execution_id);
    expect(own.redacted).toBe(false);
    expect(own.trigger_payload).toEqual({ note: 'alice note' });
    expect(own.timeline[0]).toMatchObject({ node_id: 'read', status: 'failed', error: { code: 'forbidden' } });
  });

  it('stays withheld in a replay that carries it over, and is hers in a replay with her own payload', async () => {
    // A reset replay from a later node carries the earlier nodes' outputs and the payload along.
    const reset = await alice.client.post(`${W}/executions/${adminRun}/replay`, { from_node_id: 'boom' });
    expect(reset.status, reset.text).toBe(202);
    const resetRun = await settled(reset.body.data.execution_id);
    expect(resetRun.timeline.find((t: any) => t.node_id === 'read').reused).toBe(true);
    const resetShared = await view(alice.client, resetRun.id);
    expect(resetShared.redacted).toBe(true);
    expect(JSON.stringify(resetShared)).not.toContain(SECRET);
    // A fresh run with the same payload carries the payload along.
    const again = await alice.client.post(`${W}/executions/${adminRun}/replay`, {});
    const againShared = await view(alice.client, (await settled(again.body.data.execution_id)).id);
    expect(againShared.redacted).toBe(true);
    expect(JSON.stringify(againShared)).not.toContain(PAYLOAD_SECRET);
    // With a payload of her own nothing of the administrator's run is in it.
    const fresh = await alice.client.post(`${W}/executions/${adminRun}/replay`, { with_payload: { note: 'her own' } });
    const freshView = await view(alice.client, (await settled(fresh.body.data.execution_id)).id);
    expect(freshView.redacted).toBe(false);
    expect(freshView.trigger_payload).toEqual({ note: 'her own' });
  });

  it('is withheld from a wait=true answer of a run another person started under the same Idempotency-Key', async () => {
    const headers = { headers: { 'idempotency-key': `shared-key-${Date.now()}` } };
    const first = await app.admin.post(`${W}/workflows/${sharedId}/run?wait=true&timeout_ms=90000`, { payload: { note: PAYLOAD_SECRET } }, headers);
    expect(first.body.data.redacted).toBe(false);
    const repeated = await alice.client.post(`${W}/workflows/${sharedId}/run?wait=true&timeout_ms=90000`, { payload: { note: PAYLOAD_SECRET } }, headers);
    expect(repeated.status, repeated.text).toBe(200);
    expect(repeated.headers.get('idempotent-replayed')).toBe('true');
    expect(repeated.body.data).toMatchObject({ execution_id: first.body.data.execution_id, output: null, redacted: true });
    expect(repeated.text).not.toContain(SECRET);
  });

  it("is withheld from the executions list too: a failed run's error message and data are the run's data", async () => {
    const failing = await vaultFailure('fails with the vault');
    const run = await app.admin.post(`${W}/workflows/${failing.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
    expect(run.body.data.error.message).toContain(SECRET);
    const listed = async (client: TestUser['client'] | TestApp['admin']) =>
      (await client.get(`${W}/executions?workflow_id=${failing.body.data.id}`)).body.data.items[0].error;
    expect(await listed(app.admin)).toMatchObject({ code: 'vault_read', message: `failing with ${SECRET}` });
    const seen = await listed(alice.client);
    expect(seen.code).toBe('vault_read');
    expect(JSON.stringify(seen)).not.toContain(SECRET);
  });

  it("is withheld from an error workflow whose people do not hold the failed run's rights", async () => {
    // Alice's own handler, which she may read in full.
    const handler = await alice.client.post(`${W}/workflows`, {
      title: "alice's error handler",
      trigger: { type: 'manual' },
      nodes: [{ id: 'note', type: 'transform', config: { value: '{{ trigger.error.code }}' } }],
      edges: [],
    });
    expect(handler.status, handler.text).toBe(201);
    const failing = await vaultFailure('fails with the vault, handled');
    const failingId = failing.body.data.id as number;
    // Alice, whom the workflow is shared with, points its failures at her handler; the
    // administrator edits the workflow afterwards, so its runs act for the administrator alone.
    expect((await alice.client.patch(`${W}/workflows/${failingId}`, { error_workflow_id: handler.body.data.id })).status).toBe(200);
    expect((await app.admin.patch(`${W}/workflows/${failingId}`, { title: 'fails with the vault, handled (v3)' })).status).toBe(200);
    const run = await app.admin.post(`${W}/workflows/${failingId}/run?wait=true&timeout_ms=90000`, { payload: {} });
    expect(run.body.data.error.message, run.text).toContain(SECRET);
    const failed = await failedAndHandled(run.body.data.execution_id);
    const handled = await settled(failed.error_workflow_execution_id);
    expect(handled.status).toBe('success');
    // What the handler was given is Alice's to read: her own run.
    const seen = await view(alice.client, handled.id);
    expect(seen.redacted).toBe(false);
    expect(seen.trigger_payload).toMatchObject({ execution_id: failed.id, status: 'failed', failed_node_id: 'boom', error: { code: 'vault_read' } });
    expect(JSON.stringify(seen)).not.toContain(SECRET);
    // An administrator's handler holds the failed run's rights: it is given the message.
    const adminHandler = await app.admin.post(`${W}/workflows`, {
      title: "the administrator's error handler",
      trigger: { type: 'manual' },
      nodes: [{ id: 'note', type: 'transform', config: { value: '{{ trigger.error.message }}' } }],
      edges: [],
    });
    expect((await app.admin.patch(`${W}/workflows/${failingId}`, { error_workflow_id: adminHandler.body.data.id })).status).toBe(200);
    const again = await app.admin.post(`${W}/workflows/${failingId}/run?wait=true&timeout_ms=90000`, { payload: {} });
    const failedAgain = await failedAndHandled(again.body.data.execution_id);
    const handledByAdmin = await settled(failedAgain.error_workflow_execution_id);
    expect(handledByAdmin.trigger_payload.error).toMatchObject({ code: 'vault_read', message: `failing with ${SECRET}` });
  });

  it("is withheld from the agent's executions_get of someone the run did not act for", async () => {
    const services = app.stack.services;
    const read = await runTool(services, principalOf(alice), 'executions_get', { id: adminRun });
    expect(read.ok).toBe(true);
    expect(read.result).toMatchObject({ id: adminRun, redacted: true, output: null, trigger_payload: null });
    expect(JSON.stringify(read.result)).not.toContain(SECRET);
  });
});

describe('writing a record one may edit but not view', () => {
  let ledger: string;
  beforeAll(async () => {
    // Editors may create, edit and delete ledger entries, but only administrators may read them.
    const entity = await app.admin.post(`${M}/entities`, {
      slug: 'ledger',
      name: 'Ledger',
      schema: { fields: { amount: { type: 'integer' }, holder: { type: 'string' } } },
      capabilities: { view: 'svc_manage_entities' },
    });
    expect(entity.status, entity.text).toBe(201);
    const entry = await app.admin.post(`${M}/records/ledger`, { amount: 1200, holder: 'Ada the account holder' });
    ledger = entry.body.data.uuid;
  });

  it('answers only the uuid to PATCH, POST and the record_update node; the whole record to those who may view it', async () => {
    expect((await alice.client.get(`${M}/records/ledger/${ledger}`)).status).toBe(403);
    const patched = await alice.client.patch(`${M}/records/ledger/${ledger}`, {});
    expect(patched.status, patched.text).toBe(200);
    expect(patched.body.data).toEqual({ uuid: ledger });
    const changed = await alice.client.patch(`${M}/records/ledger/${ledger}`, { amount: 1300 });
    expect(changed.body.data).toEqual({ uuid: ledger });
    const created = await alice.client.post(`${M}/records/ledger`, { amount: 5, holder: 'someone' });
    expect(created.status, created.text).toBe(201);
    expect(Object.keys(created.body.data)).toEqual(['uuid']);
    // The administrator, who may view ledger entries, gets the record.
    expect((await app.admin.patch(`${M}/records/ledger/${ledger}`, {})).body.data).toMatchObject({
      uuid: ledger,
      amount: 1300,
      holder: 'Ada the account holder',
    });

    const workflow = await alice.client.post(`${W}/workflows`, {
      title: 'touches the ledger',
      trigger: { type: 'manual' },
      nodes: [{ id: 'touch', type: 'record_update', config: { entity: 'ledger', uuid: ledger, fields: {} } }],
      edges: [],
    });
    expect(workflow.status, workflow.text).toBe(201);
    const run = await alice.client.post(`${W}/workflows/${workflow.body.data.id}/run?wait=true&timeout_ms=90000`, { payload: {} });
    expect(run.body.data, run.text).toMatchObject({ status: 'success', output: { uuid: ledger } });
    expect(run.text).not.toContain('Ada the account holder');
  });

  it("answers only the uuid to the agent's records_update and records_delete", async () => {
    const services = app.stack.services;
    const updated = await runTool(services, principalOf(alice), 'records_update', { entity: 'ledger', uuid: ledger, fields: {} });
    expect(updated).toEqual({ ok: true, result: { uuid: ledger } });
    const spare = (await app.admin.post(`${M}/records/ledger`, { amount: 1, holder: 'to delete' })).body.data.uuid as string;
    const deleted = await runTool(services, principalOf(alice), 'records_delete', { entity: 'ledger', uuid: spare });
    expect(deleted).toEqual({ ok: true, result: { uuid: spare } });
  });
});
