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

const nodeError = z.object({
  code: z.string(),
  message: z.string(),
  data: z
    .unknown()
    .optional()
    .describe(
      'What the failure carries: for `http_error` the answer’s `{status, body}` (within SVC_NODE_OUTPUT_LIMIT: a larger body is cut, with `truncated: true` and the whole `size`)',
    ),
});
named(nodeError, 'NodeError', { description: 'Why a node failed: a stable code (docs/workflows.md lists them), a message and what the failure carries' });
const runError = nodeError.extend({ node_id: z.string().optional().describe('The node whose failure ended the run') });

const summary = z.object({
  id: z.number().int(),
  workflow_id: z.number().int(),
  workflow_version: z.number().int(),
  status: z.enum(statuses),
  trigger: z.string().describe('manual, webhook, schedule, record, replay, child (a run_workflow node), or error (an error workflow handling a failed run)'),
  started_at: z.string(),
  finished_at: z.string().nullable(),
  duration_ms: z.number().int().nullable(),
  error: runError.nullable().describe('Why the run failed (the node, its code and message), or how it was stopped; null otherwise'),
  replay_of: z.number().int().nullable(),
  replay_reason: z
    .string()
    .nullable()
    .describe('Why the replay exists: the API request it came from, or the reason an operator gave a reset in the Temporal Web UI or CLI'),
});
named(summary, 'ExecutionSummary', { description: 'An execution as lists show it' });
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
  redacted: z
    .boolean()
    .describe(
      "True when the caller may see the run but not its data (it acted with rights the caller does not hold: docs/auth.md): `trigger_payload`, `output` and each node's `input` and `output` are null and every error's `message` is withheld; codes, statuses, times and attempts are shown",
    ),
  trigger_payload: z.unknown(),
  output: z.unknown(),
  error_workflow_execution_id: z
    .number()
    .int()
    .nullable()
    .describe("A failed run: the execution of its workflow's error workflow it started (`error_workflow_id`); null when none"),
  triggered_by_execution_id: z.number().int().nullable().describe('A run of an error workflow: the failed execution it handles; null otherwise'),
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
      started_at: z.string().nullable().describe("The first attempt's start"),
      finished_at: z.string().nullable(),
      duration_ms: z.number().int().nullable().describe("From the first attempt's start to the last one's end: retries and the waits between them included"),
      last_attempt_ms: z.number().int().nullable().describe('How long the last attempt took'),
      attempts: z.number().int(),
      input: z.unknown(),
      output: z.unknown().describe('A failure the run handled (on_error `continue` or `branch`) shows the output `{error}` it became'),
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
      error: null,
      replay_of: null,
      replay_reason: null,
      redacted: false,
      trigger_payload: { name: 'Ada' },
      output: { text: 'HELLO, ADA' },
      error_workflow_execution_id: null,
      triggered_by_execution_id: null,
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
          last_attempt_ms: 10,
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

const replayStarted = z.object({
  execution_id: z.number().int(),
  mode: z.enum(['reset', 'rerun']).describe('`reset`: a Temporal reset of the run to where the node started; `rerun`: a new run'),
});
const replayPlan = z.object({
  mode: z.enum(['reset', 'rerun']).describe('How the replay would be made: a Temporal reset of the run, or a new run'),
  from_node_id: z.string().nullable(),
  run: z
    .array(z.string())
    .describe('Nodes the replay runs: the node, every node downstream of it, and nodes that never finished (a branch may still skip some)'),
  reused: z.array(z.string()).describe('Nodes whose recorded outcome the replay keeps: they do not run again'),
  skipped: z.array(z.string()).describe('Nodes that stay skipped: only branches a reused node did not take lead to them'),
  nodes: z.array(
    z.object({
      node_id: z.string(),
      action: z.enum(['run', 'reuse', 'skip']),
      was: z.string().describe('How the node ended in the replayed execution (`success`, `failed`, `skipped`, `cancelled`), or `not_run`'),
    }),
  ),
  items: z
    .object({
      reused: z.number().int().describe('Items that succeeded: their results are kept (when the list gives them the same input again)'),
      run: z.number().int().describe('Items that failed or never ran: they run again'),
    })
    .optional()
    .describe("With `only_failed_items`: what becomes of the loop's items"),
});
named(replayPlan, 'ReplayPlan', {
  description: 'What a replay would do: which nodes it runs, reuses and leaves skipped, and whether it is a reset or a new run',
  examples: [
    {
      mode: 'rerun',
      from_node_id: 'charge',
      run: ['charge', 'receipt'],
      reused: ['order', 'stock'],
      skipped: [],
      nodes: [
        { node_id: 'order', action: 'reuse', was: 'success' },
        { node_id: 'stock', action: 'reuse', was: 'success' },
        { node_id: 'charge', action: 'run', was: 'failed' },
        { node_id: 'receipt', action: 'run', was: 'skipped' },
      ],
    },
  ],
});

const cancelled = named(z.object({ execution_id: z.number().int(), status: z.enum(['running', 'cancelled']) }), 'CancelledExecution', {
  description: 'An execution after a cancel: `cancelled`, or `running` while it is still stopping',
});

/** The executions surface is read-only apart from replay and cancel. */
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
        'The timeline lists every node that started, in order, with its input, output, error and attempts. Visible to whoever may see its workflow; for anyone else 404. Its data (payload, inputs, outputs, error messages) only to the people the run acted for and administrators; others see it `redacted`.',
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
      responses: {
        200: {
          description: 'A page of items',
          data: pageOf(loopItem).extend({
            redacted: z
              .boolean()
              .describe(
                "True when the caller may see the run but not its data (as the execution's `redacted`): each item's `input` and `output` are null and its error's message is withheld",
              ),
          }),
        },
      },
      handler: async ({ params, query, principal }) => ({ data: await executions.listItems(principal, params.id, params.node_id, query) }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/{id}/cancel`,
      operationId: 'cancelExecution',
      summary: 'Cancels a running execution, waits included; it ends `cancelled`',
      description:
        'Temporal cancels the run: the node in flight stops (a wait_for_event stops waiting, a pending approval ends `cancelled` and leaves the inbox, an activity or child run is cancelled), the nodes that never ran are skipped, and the execution ends `cancelled`, exactly as a cancel from the Temporal Web UI. Visible to whoever may see its workflow (404 for anyone else). Idempotent: a cancelled execution answers 200 as it is; one that ended otherwise answers 409 `execution_finished`. The call waits a few seconds for the run to end: 200 with `status: cancelled` once it has, 202 with `status: running` while it is still stopping.',
      tag: 'executions',
      access: { capability: 'svc_manage_workflows' },
      params: idParam,
      errors: { execution_finished: 'The execution already ended (success, failed or partial; `data.status`)' },
      responses: {
        200: { description: 'The execution is cancelled', data: cancelled },
        202: { description: 'Cancel requested; the run is still stopping (poll the execution)', data: cancelled },
      },
      handler: async ({ params, principal }) => {
        const result = await executions.cancel(principal, params.id);
        return { status: result.status === 'running' ? 202 : 200, data: result };
      },
    }),
    defineRoute({
      method: 'post',
      path: `${root}/{id}/replay`,
      operationId: 'replayExecution',
      summary: 'Replays an execution as a new one (202 with its id), or says what a replay would do (`dry_run`, 200)',
      description:
        'Without `from_node_id`, the whole run again (with `with_payload`, with that trigger payload). With `from_node_id`, that node and every node downstream of it run again, and every other node keeps its recorded outcome (its output, or a failure it handled) instead of running again; nodes skipped on a branch a kept node did not take stay skipped, and nodes that never finished (they failed and stopped the run, or were never reached) run. It is a Temporal reset to the point the node started when that keeps exactly those nodes (`mode: "reset"`), otherwise a new run seeded with them (`mode: "rerun"`, always with `with_payload`). `dry_run: true` answers 200 with the plan (which nodes run, are reused or stay skipped, and the mode) and starts nothing.',
      tag: 'executions',
      access: { capability: 'svc_manage_workflows' },
      params: idParam,
      body: z.strictObject({
        from_node_id: z.string().min(1).max(64).optional(),
        with_payload: z.unknown().optional(),
        dry_run: z.boolean().optional().describe('Answer what the replay would do, and start nothing'),
        only_failed_items: z
          .boolean()
          .optional()
          .describe(
            'With `from_node_id` naming a for_each node: a new run in which that loop runs again only its items that did not succeed (failed, or never ran), keeps the result of every item that succeeded (`reused: true` in its item listing), and goes on downstream with the merged results',
          ),
      }),
      bodyOptional: true,
      headers: idempotencyHeaders,
      errors: {
        execution_running: 'Still running; with `from_node_id` also while Temporal has not closed the run 15 s after the execution ended',
        node_not_run: 'The node did not run in the execution (it was skipped or never reached)',
        workflow_archived: 'The workflow is archived',
        replay_in_progress: 'A reset replay of the same run is still running (`data.execution_id`)',
        idempotency_key_reused: 'The Idempotency-Key was used for a different request',
      },
      responses: {
        202: { description: 'Replay started', data: replayStarted, headers: replayedHeader },
        // Declared as on every answer of this operation; a dry run repeats nothing, so never sends it.
        200: { description: 'What the replay would do (`dry_run: true`); nothing started', data: replayPlan, headers: replayedHeader },
      },
      handler: async ({ params, body, headers, principal }) => {
        const { dry_run: dryRun, ...request } = body;
        if (dryRun) return { data: await executions.replayDryRun(principal, params.id, request) };
        const started = await executions.replay(principal, params.id, request, idempotencyOf(headers, 'replay', { execution_id: params.id, ...request }));
        return { status: 202, data: { execution_id: started.executionId, mode: started.mode }, headers: replayedHeaders(started.replayed) };
      },
    }),
  ];
}
