import { z } from 'zod';
import { documentContent, named } from '../http/openapi.js';
import { fileJsonSchema, workflowFileSchema } from './file-schema.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { slugPattern } from '../workflow-definitions/workflow.schemas.js';
import type { WorkflowFilesService } from './workflow-files.service.js';

const root = '/api/workflow/v1';
const manage = { capability: 'svc_manage_workflows' } as const;

/** The text of one workflow file and where it lives in the caller's folder. */
export const workflowFileText = named(
  z.strictObject({
    path: z.string().min(1).max(500).describe('Where the file is, relative to the folder (`crm/sync-leads.yaml`); problems and diffs name it'),
    content: documentContent(
      z.string().max(2_000_000).describe('The file: YAML (JSON is YAML too), one workflow (`WorkflowFile`)'),
      'application/yaml',
      workflowFileSchema(),
    ),
  }),
  'WorkflowFileText',
  {
    description: 'One workflow file: its path in the folder and its YAML text (schema: `GET /api/workflow/v1/workflow.schema.json`)',
    examples: [
      {
        path: 'hello.yaml',
        content: 'slug: hello\ntitle: Hello\ntrigger:\n  type: manual\nnodes:\n  - id: greet\n    type: transform\n    config:\n      value: hi\n',
      },
    ],
  },
);

const filesFields = {
  files: z.array(workflowFileText).max(2000).describe('Every workflow file of the folder'),
  prune: z
    .boolean()
    .optional()
    .describe('Archive the workflows in scope that no file names: with `tag`, those carrying the tag; without, those the caller owns. Default false'),
  tag: z.string().regex(slugPattern).optional().describe('Apply for one tag: every file must carry it, and prune archives only within it'),
};

export const filesRequest = named(z.strictObject(filesFields), 'WorkflowFilesRequest', {
  description: 'A folder of workflow files to plan',
  examples: [{ files: [{ path: 'hello.yaml', content: 'slug: hello\n...' }], prune: false }],
});

export const applyRequest = named(
  z.strictObject({
    ...filesFields,
    plan_hash: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .optional()
      .describe('Apply only while the plan is this one (`plan_hash` of POST /plan); 409 `plan_stale` otherwise'),
  }),
  'WorkflowApplyRequest',
  { description: 'A folder of workflow files to apply, optionally guarded by the hash of the plan that was reviewed' },
);

const change = named(
  z.object({
    slug: z.string(),
    path: z.string(),
    action: z.enum(['create', 'update', 'archive', 'unchanged']),
    id: z.number().int().nullable().describe("The workflow's id on this server; null for one a plan would create"),
    diff: z.string().describe('Unified diff of the file as the server has it (`a/`) against the file given (`b/`); empty when unchanged'),
  }),
  'WorkflowFileChange',
  { description: 'What applying the files does to one workflow' },
);

const plan = named(
  z.object({
    plan_hash: z.string().describe("SHA-256 of what the plan saw (the server's workflows and the files); apply with it to apply exactly this plan"),
    changes: z.array(change),
  }),
  'WorkflowPlan',
  {
    description: 'The changes applying the files would make, one per workflow, in slug order',
    examples: [
      {
        plan_hash: 'c0ffee'.padEnd(64, '0'),
        changes: [
          {
            slug: 'hello',
            path: 'hello.yaml',
            action: 'update',
            id: 7,
            diff: '--- a/hello.yaml\n+++ b/hello.yaml\n@@ -2 +2 @@\n-title: Hello\n+title: Hello there\n',
          },
        ],
      },
    ],
  },
);

const applied = named(
  plan.extend({
    warnings: z
      .array(z.object({ slug: z.string(), message: z.string() }))
      .describe('Temporal schedules that could not follow the committed change; the message says how to retry'),
  }),
  'WorkflowApplyResult',
  { description: 'The changes made (every one, or none), and schedules that lag' },
);

const problems = {
  validation_failed:
    'A file is invalid: `data.errors` lists every problem as `{file, field, message, line?}` (YAML, fields, unknown labels, slugs or logins, ambiguous labels, graph checks, rights); nothing was applied',
};

export function workflowFilesRoutes({ workflowFiles }: { workflowFiles: WorkflowFilesService }, openApi: () => unknown): AnyRoute[] {
  let fileSchema: ReturnType<typeof fileJsonSchema> | undefined;
  return [
    defineRoute({
      method: 'get',
      path: `${root}/workflow.schema.json`,
      operationId: 'workflowFileSchema',
      summary: 'The JSON Schema (draft 2020-12) of a workflow file, for editors',
      description:
        "The `WorkflowFile` schema of this document with what it refers to, as one JSON Schema: point an editor's YAML support at it (`yaml.schemas` in VS Code) to validate and complete workflow files. Public, like this document: it names node types, not workflows.",
      tag: 'workflows',
      access: 'public',
      responses: {
        200: {
          description: 'The JSON Schema',
          raw: z.object({ $schema: z.string(), $defs: z.record(z.string(), z.unknown()) }).loose(),
        },
      },
      // Built once: the document it is drawn from does not change while the process runs.
      handler: async () => ({ raw: (fileSchema ??= fileJsonSchema(openApi() as Parameters<typeof fileJsonSchema>[0])) }),
    }),
    defineRoute({
      method: 'get',
      path: `${root}/export`,
      operationId: 'exportWorkflows',
      summary: 'The workflows the caller sees, one YAML file each, with names instead of ids',
      description:
        'Every workflow visible to the caller that is not archived, filtered by `tag` and `q` like the list, as `<slug>.yaml`: connections by label, workflows by slug, users by login, no ids, versions or timestamps. The same state gives the same bytes. A reference the caller may not see stays an id (and a plan of the file says so).',
      tag: 'workflows',
      access: 'authenticated',
      query: z.strictObject({
        tag: z.string().max(100).optional(),
        q: z.string().min(1).max(200).optional().describe('Full-text search over title and description'),
      }),
      responses: { 200: { description: 'The files', data: z.object({ files: z.array(workflowFileText) }) } },
      handler: async ({ query, principal }) => ({ data: await workflowFiles.export(principal, query) }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/plan`,
      operationId: 'planWorkflowFiles',
      summary: 'What applying a folder of workflow files would change; changes nothing',
      description:
        'Compares each file with the workflow of its slug: `create`, `update` (with a unified diff), `unchanged`, and with `prune` the workflows in scope that no file names: `archive`. Every check of create and PATCH runs (and is rolled back), so a plan that answers 200 applies. `plan_hash` names what the plan saw; apply with it to refuse a changed state.',
      tag: 'workflows',
      access: manage,
      body: filesRequest,
      errors: problems,
      responses: { 200: { description: 'The plan', data: plan } },
      handler: async ({ body, principal }) => ({ data: await workflowFiles.plan(principal, body) }),
    }),
    defineRoute({
      method: 'post',
      path: `${root}/apply`,
      operationId: 'applyWorkflowFiles',
      summary: 'Applies a folder of workflow files, all or nothing',
      description:
        "One transaction: every file's workflow is created or updated as create and PATCH would for the caller (a file's `status` is applied as written; without one, the server's stays), and with `prune` the workflows in scope that no file names are archived. Temporal schedules follow after the commit. Applying the same files twice changes nothing. With `plan_hash`, a state or files other than the plan saw answer 409 `plan_stale`.",
      tag: 'workflows',
      access: manage,
      body: applyRequest,
      errors: { ...problems, plan_stale: 'The workflows or the files are no longer what the plan saw; nothing was applied' },
      responses: { 200: { description: 'Applied', data: applied } },
      handler: async ({ body, principal }) => ({ data: await workflowFiles.apply(principal, body) }),
    }),
  ];
}
