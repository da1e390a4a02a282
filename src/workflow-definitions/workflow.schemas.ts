import { z } from 'zod';
import { documentAs, named } from '../http/openapi.js';
import { documentedNode } from '../nodes/index.js';
import type { Graph, GraphNode } from '../../workflows/defs.js';

const id = z.number().int().positive().max(2_147_483_647);

export const nodeIdPattern = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;
export const slugPattern = /^[a-z0-9][a-z0-9-]{0,99}$/;

export const nodeSchema = z.strictObject({
  id: z.string().regex(nodeIdPattern, 'letters, digits, _ or -, starting with a letter or _ (max 64)'),
  type: z.string().min(1).max(40),
  name: z.string().max(200).optional(),
  connection_id: id.optional(),
  config: z.record(z.string(), z.unknown()).default({}),
  retry: z
    .strictObject({
      max_attempts: z.number().int().min(1).max(100).optional(),
      initial_interval_ms: z.number().int().min(10).max(3_600_000).optional(),
      backoff_coefficient: z.number().min(1).max(10).optional(),
      max_interval_ms: z.number().int().min(10).max(86_400_000).optional(),
    })
    .optional(),
  timeout_ms: z.number().int().min(100).max(86_400_000).optional(),
  on_error: z
    .enum(['fail', 'continue', 'branch'])
    .optional()
    .describe(
      'After the retries are spent: `fail` (default) stops the run; `continue` makes the error the output `{error: {code, message, data?}}` and the run ends `partial`; `branch` makes it the output too and takes only the edges with `branch: "error"`',
    ),
});
documentAs(nodeSchema, documentedNode(nodeSchema));

export const edgeSchema = z.strictObject({
  from: z.string().min(1).max(64),
  to: z.string().min(1).max(64),
  branch: z.string().min(1).max(100).optional(),
});
named(edgeSchema, 'Edge', {
  description:
    'Runs `to` after `from`; from a condition or switch node only on the branch named; with `branch: "error"` only when `from` (on_error `branch`) failed',
});

export const overlapPolicies = ['skip', 'buffer_one', 'buffer_all', 'cancel_other', 'terminate_other', 'allow_all'] as const;

export const triggerSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('manual'), config: z.strictObject({}).default({}) }),
  z.strictObject({
    type: z.literal('webhook'),
    config: z.strictObject({ respond: z.enum(['execution', 'last_node']).default('execution') }).default({ respond: 'execution' }),
  }),
  z.strictObject({
    type: z.literal('schedule'),
    config: z.strictObject({
      cron: z.string().min(9).max(200),
      overlap: z.enum(overlapPolicies).default('skip'),
      timezone: z.string().max(64).optional(),
    }),
  }),
  z.strictObject({
    type: z.literal('record'),
    config: z.strictObject({
      entity: z.string().min(1).max(63),
      events: z
        .array(z.enum(['created', 'updated', 'deleted']))
        .min(1)
        .default(['created', 'updated', 'deleted']),
    }),
  }),
]);
named(triggerSchema, 'Trigger', { description: 'What starts runs: by hand (or the API), a webhook call, a cron schedule, or record changes' });
export type Trigger = z.infer<typeof triggerSchema>;

const errorWorkflowId = id
  .nullable()
  .describe(
    "A workflow to run when a run of this one ends `failed` (its trigger payload: `{execution_id, workflow_id, workflow_slug, status, failed_node_id, error, started_at, ended_at}`); it must be visible to this workflow's owner. Null: none",
  );

const definitionFields = {
  title: z.string().trim().min(1).max(200),
  slug: z.string().regex(slugPattern, 'lower-case letters, digits and -, max 100').optional(),
  description: z.string().max(10_000).default(''),
  tags: z.array(z.string().regex(slugPattern, 'tag slugs: lower-case letters, digits and -')).max(50).default([]),
  status: z.enum(['active', 'inactive']).default('inactive'),
  trigger: triggerSchema,
  nodes: z.array(nodeSchema).min(1).max(500),
  edges: z.array(edgeSchema).max(2000).default([]),
  shared_with: z.array(id).max(500).default([]),
  error_workflow_id: errorWorkflowId.default(null),
};

/** POST /workflows body. */
export const createWorkflowSchema = z.strictObject(definitionFields);
named(createWorkflowSchema, 'WorkflowCreate', {
  description: 'A whole workflow definition: its trigger and graph',
  examples: [
    {
      title: 'Greet and shout',
      trigger: { type: 'manual' },
      nodes: [
        { id: 'greet', type: 'transform', config: { value: { greeting: 'Hello, {{ trigger.name }}' } } },
        { id: 'wait', type: 'delay', config: { duration_ms: 2000 } },
        { id: 'shout', type: 'transform', config: { value: { text: '{{ $uppercase(nodes.greet.greeting) }}' } } },
      ],
      edges: [
        { from: 'greet', to: 'wait' },
        { from: 'wait', to: 'shout' },
      ],
    },
  ],
});
export type CreateWorkflow = z.infer<typeof createWorkflowSchema>;

/** PATCH /workflows/{id} body: any subset of the definition. */
export const updateWorkflowSchema = z
  .strictObject({
    title: definitionFields.title.optional(),
    slug: definitionFields.slug,
    description: z.string().max(10_000).optional(),
    tags: definitionFields.tags.unwrap().optional(),
    trigger: triggerSchema.optional(),
    nodes: definitionFields.nodes.optional(),
    edges: z.array(edgeSchema).max(2000).optional(),
    shared_with: z.array(id).max(500).optional(),
    error_workflow_id: errorWorkflowId.optional(),
  })
  .refine((v) => Object.keys(v).length > 0, { message: 'send at least one field' });
named(updateWorkflowSchema, 'WorkflowUpdate', {
  description: 'Any part of a workflow definition; the rest stays',
  examples: [{ title: 'Greet, wait and shout' }],
});
export type UpdateWorkflow = z.infer<typeof updateWorkflowSchema>;

export const workflowListItem = z.object({
  id: z.number().int(),
  slug: z.string(),
  title: z.string(),
  status: z.enum(['active', 'inactive', 'archived']),
  trigger_type: z.string(),
  node_count: z.number().int(),
  description: z.string(),
  tags: z.array(z.string()),
});
named(workflowListItem, 'WorkflowSummary', { description: 'A workflow as lists show it' });

export const workflowView = workflowListItem.extend({
  version: z.number().int(),
  trigger: triggerSchema,
  nodes: z.array(nodeSchema),
  edges: z.array(edgeSchema),
  owner: z.object({ id: z.number().int(), login: z.string() }),
  shared_with: z.array(z.number().int()),
  error_workflow_id: z.number().int().nullable().describe('The workflow run when a run of this one fails; null: none'),
  webhook: z.object({ url: z.string(), secret: z.string() }).nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});
named(workflowView, 'Workflow', {
  description: 'A workflow with its whole definition',
  examples: [
    {
      id: 1,
      slug: 'greet-and-shout',
      title: 'Greet and shout',
      status: 'inactive',
      trigger_type: 'manual',
      node_count: 2,
      description: '',
      tags: [],
      version: 1,
      trigger: { type: 'manual', config: {} },
      nodes: [
        { id: 'greet', type: 'transform', config: { value: { greeting: 'Hello, {{ trigger.name }}' } } },
        { id: 'wait', type: 'delay', config: { duration_ms: 2000 } },
      ],
      edges: [{ from: 'greet', to: 'wait' }],
      owner: { id: 1, login: 'admin' },
      shared_with: [],
      error_workflow_id: null,
      webhook: null,
      created_at: '2025-01-01T12:00:00.000Z',
      updated_at: '2025-01-01T12:00:00.000Z',
    },
  ],
});

/** A stored workflow as the service reads it (one row of `workflows` with its owner's login). */
export type WorkflowStatus = 'active' | 'inactive' | 'archived';

export interface WorkflowRow {
  id: number;
  slug: string;
  title: string;
  description: string;
  tags: string[];
  status: WorkflowStatus;
  trigger_type: string;
  trigger: Trigger;
  nodes: GraphNode[];
  edges: Graph['edges'];
  node_count: number;
  connection_ids: number[];
  version: number;
  webhook_secret: string | null;
  owner_id: number;
  owner_login: string;
  /** Who last changed the definition: a run of it carries this person's rights with the owner's. */
  updated_by: number | null;
  shared_with: number[];
  /** The workflow run when a run of this one fails. */
  error_workflow_id: number | null;
  created_at: Date | string;
  updated_at: Date | string;
}
