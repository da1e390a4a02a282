import type { PublicUrl } from '../platform/public-url.js';
import { z } from 'zod';
import type { Principal } from '../auth/auth.service.js';
import { toIso } from '../db/sql.js';
import { idempotencyHeaders, idempotencyOf, replayedHeader, replayedHeaders } from '../executions/idempotency.js';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { idParam, pageOf, pagination, queryBoolean } from '../http/pagination.js';
import { createWorkflowSchema, updateWorkflowSchema, workflowListItem, workflowView } from './workflow.schemas.js';
import type { WorkflowRow } from './workflow.service.js';
import type { ExecutionService } from '../executions/execution.service.js';
import type { WorkflowService } from './workflow.service.js';
import { runResult, runResultOf } from './run-result.js';

const root = '/api/workflow/v1';
const manage = { capability: 'svc_manage_workflows' } as const;
const executionStarted = z.object({ execution_id: z.number().int() });
named(executionStarted, 'ExecutionStarted', { description: 'The execution a call started', examples: [{ execution_id: 42 }] });

export function workflowView_(row: WorkflowRow, principal: Principal | undefined, apiBase: string) {
  const mayManage = principal && (principal.role === 'administrator' || principal.id === row.owner_id);
  return {
    id: row.id,
    slug: row.slug,
    title: row.title,
    status: row.status,
    trigger_type: row.trigger_type,
    node_count: row.node_count,
    description: row.description,
    tags: row.tags,
    version: row.version,
    trigger: row.trigger,
    nodes: row.nodes as unknown as Record<string, unknown>[],
    edges: row.edges as unknown as Record<string, unknown>[],
    owner: { id: row.owner_id, login: row.owner_login },
    shared_with: row.shared_with,
    error_workflow_id: row.error_workflow_id ?? null,
    webhook:
      row.trigger.type === 'webhook' && row.webhook_secret && mayManage ? { url: `${apiBase}${root}/hooks/${row.slug}`, secret: row.webhook_secret } : null,
    created_at: toIso(row.created_at)!,
    updated_at: toIso(row.updated_at)!,
  };
}

export function workflowRoutes({
  workflows,
  executions,
  publicUrl,
}: {
  workflows: WorkflowService;
  executions: ExecutionService;
  publicUrl: Pick<PublicUrl, 'base'>;
}): AnyRoute[] {
  // Where callers from outside reach this API: SVC_PUBLIC_URL, else the origin the request came to
  // (X-Forwarded-Proto and X-Forwarded-Host when TRUST_PROXY is set).
  const view = (row: WorkflowRow, principal: Principal, ctx: { protocol: string; host: string }) =>
    workflowView_(row, principal, publicUrl.base(`${ctx.protocol}://${ctx.host}`));
  const transition = (operationId: string, action: 'activate' | 'deactivate' | 'restore', summary: string, description: string) =>
    defineRoute({
      method: 'post',
      path: `${root}/workflows/{id}/${action}`,
      operationId,
      summary,
      description,
      tag: 'workflows',
      access: manage,
      params: idParam,
      errors: { workflow_archived: 'Not allowed from the current status' },
      responses: { 200: { description: 'The workflow', data: workflowView } },
      handler: async ({ params, principal, ctx }) => ({ data: view(await workflows[action](principal, params.id), principal, ctx) }),
    });

  return [
    defineRoute({
      method: 'get',
      path: `${root}/workflows`,
      operationId: 'listWorkflows',
      summary: 'Workflows visible to the caller, filtered and paginated',
      description:
        'The workflows the caller owns or that `shared_with` names them in (administrators see all), newest first (with `q`, most relevant first), without their graphs (GET one workflow for those).',
      tag: 'workflows',
      access: 'authenticated',
      query: z.strictObject({
        status: z.enum(['active', 'inactive', 'archived']).optional(),
        tag: z.string().max(100).optional(),
        q: z.string().min(1).max(200).optional().describe('Full-text search over title and description'),
        ...pagination(100),
      }),
      responses: { 200: { description: 'A page of workflows', data: pageOf(workflowListItem) } },
      handler: async ({ query, principal }) => ({ data: await workflows.list(principal, query) }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/workflows`,
      operationId: 'createWorkflow',
      summary: 'Creates a workflow from its full definition (graph validated; every problem listed)',
      description:
        'The graph must be acyclic, with node ids unique, known node types each with a valid `config` (schema `Node`), connections that exist for the types that need one, and branch names the source node can take; every problem is listed in one 400 `validation_failed`. The slug defaults to one made from the title. A new workflow is `inactive` unless `status` says `active`; a webhook trigger gets its URL and secret (in `webhook`).',
      tag: 'workflows',
      access: manage,
      body: createWorkflowSchema,
      errors: { conflict: 'The slug is taken' },
      responses: { 201: { description: 'Created', data: workflowView } },
      handler: async ({ body, principal, ctx }) => ({ status: 201, data: view(await workflows.create(principal, body), principal, ctx) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/workflows/{id}`,
      operationId: 'getWorkflow',
      summary: 'One workflow with its full graph',
      description:
        'Visible to its owner, the users `shared_with` names and administrators; for anyone else it does not exist (404). `webhook` (URL and secret) is shown to its owner and administrators only.',
      tag: 'workflows',
      access: 'authenticated',
      params: idParam,
      responses: { 200: { description: 'The workflow', data: workflowView } },
      handler: async ({ params, principal, ctx }) => ({ data: view(await workflows.get(principal, params.id), principal, ctx) }),
    }),
    defineRoute({
      method: 'patch',
      path: `${root}/workflows/{id}`,
      operationId: 'updateWorkflow',
      summary: 'Partial update; the definition is validated again and its version goes up by one',
      description:
        'Fields left out keep their value; `nodes` and `edges` replace the whole graph. Runs already started go on with the version they started with. An archived workflow must be restored first (409 `workflow_archived`).',
      tag: 'workflows',
      access: manage,
      params: idParam,
      body: updateWorkflowSchema,
      errors: { workflow_archived: 'The workflow is archived', conflict: 'The slug is taken' },
      responses: { 200: { description: 'The updated workflow', data: workflowView } },
      handler: async ({ params, body, principal, ctx }) => ({ data: view(await workflows.update(principal, params.id, body), principal, ctx) }),
    }),
    defineRoute({
      method: 'delete',
      path: `${root}/workflows/{id}`,
      operationId: 'deleteWorkflow',
      summary: 'Archives the workflow; with force=true an archived workflow is purged with its executions',
      description:
        'Archiving (soft delete) pauses its schedule, stops its trigger and keeps its executions; restore brings it back. Purging (`force=true`, on an archived workflow only) deletes it and its executions for good, and is refused while runs are in progress.',
      tag: 'workflows',
      access: manage,
      params: idParam,
      query: z.strictObject({ force: queryBoolean.optional() }),
      errors: { not_archived: 'Purge of a workflow that is not archived', executions_running: 'Purge of a workflow with runs in progress' },
      responses: { 200: { description: 'Archived or purged', data: z.object({ id: z.number().int(), status: z.enum(['archived', 'purged']) }) } },
      handler: async ({ params, query, principal }) => ({ data: await workflows.remove(principal, params.id, query.force ?? false) }),
    }),
    transition(
      'activateWorkflow',
      'activate',
      'Sets the workflow active (idempotent); a schedule trigger gets its Temporal Schedule',
      'Only active workflows are started by their trigger (schedule, webhook, record events); a manual run works either way. Activating an active workflow changes nothing.',
    ),
    transition(
      'deactivateWorkflow',
      'deactivate',
      'Sets an active workflow back to inactive; its schedule is paused',
      'Its trigger stops starting runs; runs in progress go on. Deactivating an inactive workflow changes nothing.',
    ),
    transition(
      'restoreWorkflow',
      'restore',
      'Brings an archived workflow back as inactive (no-op otherwise)',
      'The workflow can be edited and run again; activate it to turn its trigger back on.',
    ),
    defineRoute({
      method: 'post',
      path: `${root}/workflows/{id}/run`,
      operationId: 'runWorkflow',
      summary: 'Starts a run, the same as a manual Run now; 202 with the execution id',
      description:
        'With `wait=true` the call waits (up to `timeout_ms`, default 30 s) and answers 200 with the result (a failed run with its `error`), or 202 if the run is still going.',
      tag: 'workflows',
      access: manage,
      params: idParam,
      query: z.strictObject({ wait: queryBoolean.optional(), timeout_ms: z.coerce.number().int().min(1).max(120_000).optional() }),
      body: z.strictObject({ payload: z.unknown().optional() }),
      bodyOptional: true,
      headers: idempotencyHeaders,
      errors: { workflow_archived: 'The workflow is archived', idempotency_key_reused: 'The Idempotency-Key was used for a different request' },
      responses: {
        202: { description: 'Started', data: executionStarted, headers: replayedHeader },
        200: { description: 'Finished within the wait', data: runResult, headers: replayedHeader },
      },
      handler: async ({ params, body, query, headers, principal }) => {
        const workflow = await workflows.get(principal, params.id);
        const payload = body.payload ?? {};
        const started = await executions.start(workflow, { payload, trigger: 'manual' }, principal.id, idempotencyOf(headers, 'run', { payload }));
        const replayed = replayedHeaders(started.replayed);
        if (query.wait) {
          // A repeated Idempotency-Key's run may have ended long ago: its end is not heard again, Temporal answers at once.
          const result = await executions.waitForResult(
            started.temporalWorkflowId,
            query.timeout_ms ?? 30_000,
            started.replayed ? undefined : started.executionId,
          );
          if (result) {
            // A repeated Idempotency-Key may name another person's run: its data is theirs.
            const shown = !started.replayed || (await executions.mayViewRunData(principal, started.executionId));
            return { data: runResultOf(started.executionId, result, shown), headers: replayed };
          }
        }
        return { status: 202, data: { execution_id: started.executionId }, headers: replayed };
      },
    }),
  ];
}
