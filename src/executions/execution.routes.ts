import { z } from 'zod';
import { idempotencyHeaders, idempotencyOf, replayedHeader, replayedHeaders } from './idempotency.js';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { MAX_ID, idParam, pageOf, pagination } from '../http/pagination.js';
import { nodeIdPattern } from '../workflow-definitions/workflow.schemas.js';
import type { ExecutionService } from './execution.service.js';

const root = '/api/workflow/v1/executions';
const statuses = ['running', 'success', 'failed', 'partial', 'cancelled'] as const;
const isoTimestamp = z.iso.datetime({ offset: true }).transform((v) => new Date(v));

const summary = z.object({
  id: z.number().int(),
  workflow_id: z.number().int(),
  workflow_version: z.number().int(),
  status: z.enum(statuses),
  trigger: z.string(),
  started_at: z.string(),
  finished_at: z.string().nullable(),
  duration_ms: z.number().int().nullable(),
  replay_of: z.number().int().nullable(),
  replay_reason: z
    .string()
    .nullable()
    .describe('Why the replay exists: the API request it came from, or the reason an operator gave a reset in the Temporal Web UI or CLI'),
});
named(summary, 'ExecutionSummary', { description: 'An execution as lists show it' });
const nodeError = z.object({ code: z.string(), message: z.string() });
named(nodeError, 'NodeError', { description: 'Why a node failed: a stable code (docs/workflows.md lists them) and a message' });
const itemCounts = z.object({
  total: z.number().int(),
  pending: z.number().int().describe('Not run yet, or running'),
  succeeded: z.number().int(),
  failed: z.number().int(),
  skipped: z.number().int().describe('Never ran: the loop stopped at a failed item'),
  cancelled: z.number().int().describe('Never ran: the run was cancelled'),
});
named(itemCounts, 'LoopItemCounts', { description: "A for_each node's items by status" });
const itemStatuses = ['pending', 'success', 'failed', 'skipped', 'cancelled'] as const;
const loopItem = z.object({
  scope: z
    .array(z.number().int())
    .describe('For a loop inside a for_each body: the indexes of the outer items this item ran in, outermost first; `[]` for a loop of the graph itself'),
  index: z.number().int().describe('Its place in the list, from 0'),
  status: z
    .enum(itemStatuses)
    .describe('`pending`: not run yet or running; `skipped`: never ran, the loop stopped at a failed item; `cancelled`: never ran, the run was cancelled'),
  input: z.unknown().describe('The item'),
  output: z
    .unknown()
    .describe("The body's output for it (its one sink node's, or `output_node`'s; null when that node was skipped), or the child run's output"),
  error: nodeError.extend({ node_id: z.string().optional().describe('The body node that failed') }).nullable(),
  attempts: z.number().int().describe('The most attempts any node of its body took'),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  duration_ms: z.number().int().nullable(),
  reused: z.boolean().describe('Carried over from the replayed execution (a replay of failed items), not run again'),
});
named(loopItem, 'LoopItem', {
  description: 'One item of a for_each node: its input, its result, attempts and times',
  examples: [
    {
      scope: [],
      index: 3,
      status: 'failed',
      input: { id: 'lead-4', email: 'ada@example.com' },
      output: null,
      error: { code: 'http_error', message: 'HTTP 500 from POST /records', node_id: 'create' },
      attempts: 3,
      started_at: '2025-01-01T12:00:01.000Z',
      finished_at: '2025-01-01T12:00:04.700Z',
      duration_ms: 3700,
      reused: false,
    },
  ],
});

const detail = summary.extend({
  trigger_payload: z.unknown(),
  error: nodeError.extend({ node_id: z.string().optional() }).nullable(),
  output: z.unknown(),
  temporal: z.object({ workflow_id: z.string(), run_id: z.string().nullable(), ui_url: z.string() }),
  trace_id: z
    .string()
    .nullable()
    .describe('The OpenTelemetry trace the run belongs to (from the request that started it, or its first activity); null when tracing is off'),
  llm_usage: z
    .object({ calls: z.number().int(), tokens_in: z.number().int(), tokens_out: z.number().int(), cost_usd: z.number(), price_known: z.boolean() })
    .nullable()
    .describe(
      "Model calls of the run's llm_prompt nodes: tokens and cost (SVC_AGENT_PRICES; price_known false when a model has no price); null when no node called a model",
    ),
  timeline: z.array(
    z.object({
      node_id: z.string(),
      node_type: z.string(),
      status: z.enum(['running', 'success', 'failed', 'skipped', 'cancelled']).describe('`cancelled`: the node was in flight when the run was cancelled'),
      started_at: z.string().nullable(),
      finished_at: z.string().nullable(),
      duration_ms: z.number().int().nullable(),
      attempts: z.number().int(),
      input: z.unknown(),
      output: z.unknown(),
      error: nodeError.nullable(),
      reused: z.boolean().describe('Carried over from the replayed execution, not run again'),
      items: itemCounts
        .optional()
        .describe('A for_each node only: its items by status, as they move while it runs (each item is listed at GET /executions/{id}/nodes/{node_id}/items)'),
    }),
  ),
});
named(detail, 'Execution', {
  description: 'One run of a workflow: its status, payload, output, error, model usage and the timeline of its nodes',
  examples: [
    {
      id: 42,
      workflow_id: 1,
      workflow_version: 1,
      status: 'success',
      trigger: 'manual',
      started_at: '2025-01-01T12:00:00.000Z',
      finished_at: '2025-01-01T12:00:02.100Z',
      duration_ms: 2100,
      replay_of: null,
      replay_reason: null,
      trigger_payload: { name: 'Ada' },
      error: null,
      output: { text: 'HELLO, ADA' },
      temporal: {
        workflow_id: 'svc-execution-42',
        run_id: '0194a6c2-5b1e-7c3d-9e8f-0a1b2c3d4e5f',
        ui_url: 'http://localhost:8233/namespaces/default/workflows/svc-execution-42/0194a6c2-5b1e-7c3d-9e8f-0a1b2c3d4e5f/history',
      },
      trace_id: '4bf92f3577b34da6a3ce929d0e0e4736',
      llm_usage: null,
      timeline: [
        {
          node_id: 'greet',
          node_type: 'transform',
          status: 'success',
          started_at: '2025-01-01T12:00:00.010Z',
          finished_at: '2025-01-01T12:00:00.020Z',
          duration_ms: 10,
          attempts: 1,
          input: { value: { greeting: 'Hello, {{ trigger.name }}' } },
          output: { greeting: 'Hello, Ada' },
          error: null,
          reused: false,
        },
      ],
    },
  ],
});

/** The executions surface is read-only apart from replay. */
export function executionRoutes({ executions }: { executions: ExecutionService }): AnyRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: root,
      operationId: 'listExecutions',
      summary: 'Executions of the workflows visible to the caller, newest first',
      description: 'Filtered by workflow, status and start time; without their timelines (GET one execution for that).',
      tag: 'executions',
      access: 'authenticated',
      query: z.strictObject({
        workflow_id: z.coerce.number().int().positive().max(MAX_ID).optional(),
        status: z.enum(statuses).optional(),
        since: isoTimestamp.optional().describe('Started at or after (ISO 8601)'),
        until: isoTimestamp.optional().describe('Started at or before (ISO 8601)'),
        ...pagination(100),
      }),
      responses: { 200: { description: 'A page of executions', data: pageOf(summary) } },
      handler: async ({ query, principal }) => ({ data: await executions.list(principal, query) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/{id}`,
      operationId: 'getExecution',
      summary: 'One execution with its full timeline and a link to the run in the Temporal Web UI',
      description:
        'The timeline lists every node that started, in order, with its input, output, error and attempts. Visible to whoever may see its workflow; for anyone else 404.',
      tag: 'executions',
      access: 'authenticated',
      params: idParam,
      responses: { 200: { description: 'The execution', data: detail } },
      handler: async ({ params, principal }) => ({ data: await executions.view(principal, params.id) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/{id}/nodes/{node_id}/items`,
      operationId: 'listExecutionItems',
      summary: "A for_each node's items, by index, with their inputs, results, attempts and times",
      description:
        'Visible to whoever may see the execution. `status` filters; a loop inside a for_each body ran once per outer item: `scope` (the outer indexes, outermost first, comma-separated: `3` or `3,7`) picks the items of one of those runs, and without it every run is listed, by scope then index. 404 when the node is not a for_each node of the version that ran.',
      tag: 'executions',
      access: 'authenticated',
      params: idParam.extend({ node_id: z.string().regex(nodeIdPattern, 'a node id') }),
      query: z.strictObject({
        status: z.enum(itemStatuses).optional(),
        scope: z
          .string()
          .regex(/^\d{1,9}(,\d{1,9}){0,7}$/, 'outer item indexes, comma-separated')
          .transform((v) => v.split(',').map(Number))
          .optional()
          .describe('The outer items a nested loop ran in: their indexes, outermost first, comma-separated'),
        ...pagination(200, 50),
      }),
      responses: { 200: { description: 'A page of items', data: pageOf(loopItem) } },
      handler: async ({ params, query, principal }) => ({ data: await executions.listItems(principal, params.id, params.node_id, query) }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/{id}/replay`,
      operationId: 'replayExecution',
      summary: 'Replays an execution as a new one; 202 with the new execution id',
      description:
        '`from_node_id` alone resets the Temporal run to just before that node, so earlier nodes are not run again; `with_payload` starts a new run with that trigger payload; both together start a new run that reuses the recorded outputs of the nodes upstream of `from_node_id`.',
      tag: 'executions',
      access: { capability: 'svc_manage_workflows' },
      params: idParam,
      body: z.strictObject({ from_node_id: z.string().min(1).max(64).optional(), with_payload: z.unknown().optional() }),
      bodyOptional: true,
      headers: idempotencyHeaders,
      errors: {
        execution_running: 'Still running; with `from_node_id` also while Temporal has not closed the run 15 s after the execution ended',
        node_not_run: 'The node never ran, or Temporal no longer has the run to reset',
        workflow_archived: 'The workflow is archived',
        replay_in_progress: 'A reset replay of the same run is still running (`data.execution_id`)',
        idempotency_key_reused: 'The Idempotency-Key was used for a different request',
      },
      responses: { 202: { description: 'Replay started', data: z.object({ execution_id: z.number().int() }), headers: replayedHeader } },
      handler: async ({ params, body, headers, principal }) => {
        const started = await executions.replay(principal, params.id, body, idempotencyOf(headers, 'replay', { execution_id: params.id, ...body }));
        return { status: 202, data: { execution_id: started.executionId }, headers: replayedHeaders(started.replayed) };
      },
    }),
  ];
}
