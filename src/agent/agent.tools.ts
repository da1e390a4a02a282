import { z } from 'zod';
import type { Principal } from '../auth/auth.service.js';
import { AppError, conflict, forbidden } from '../platform/errors.js';
import type { ExecutionService } from '../executions/execution.service.js';
import type { EntityService } from '../records/entity.service.js';
import type { RecordService } from '../records/record.service.js';
import type { WorkflowService } from '../workflow-definitions/workflow.service.js';
import { AGENT_GATED_TOOLS, isGatedTool } from '../../workflows/defs.js';
import type { ToolSpec } from '../providers/index.js';
import { CODE } from '../../workflows/error-codes.js';

/** What the tools act on: the features a session's owner may use through the agent. */
export interface AgentToolPorts {
  records: RecordService;
  entities: EntityService;
  workflows: WorkflowService;
  executions: ExecutionService;
}

/** One tool the model may call: its argument schema and what it does. */
interface ToolDefinition<A = any> {
  name: string;
  description: string;
  args: z.ZodObject<any>;
  /** One line a person reads before approving the call. */
  summarize(args: A): string;
  run(ports: AgentToolPorts, owner: Principal, args: A): Promise<unknown>;
  /**
   * Gated tools: what `run` would refuse, checked without side effects, so that arguments an
   * approver edits are refused before the decision is taken rather than when the tool runs.
   */
  check?(ports: AgentToolPorts, runner: Principal, args: A): Promise<void>;
}

/** A tool as the registry holds it: whether it is gated comes from AGENT_GATED_TOOLS alone. */
export interface AgentTool<A = any> extends ToolDefinition<A> {
  gated: boolean;
}

const entity = z.string().min(1).max(63);
const fields = z.record(z.string(), z.unknown());
/** A value an EQL `:name` parameter takes. */
const eqlScalar = z.union([z.string(), z.number(), z.boolean(), z.null()]);

const definitions: ToolDefinition[] = [
  {
    name: 'records_search',
    description:
      'Lists records of an entity, optionally filtered by an EQL expression and sorted (`field:asc`). Put values in `params` and name them in the expression as `:name`, e.g. eql `stage = :stage and age > :age` with params `{"stage": "lead", "age": 30}` (a list parameter goes inside `in (...)`): a value in `params` is always one value, whatever characters it holds.',
    args: z.object({
      entity,
      eql: z.string().max(2000).optional(),
      params: z.record(z.string(), z.union([eqlScalar, z.array(eqlScalar).max(500)])).optional(),
      sort: z.string().max(500).optional(),
      per_page: z.number().int().min(1).max(50).optional(),
    }),
    summarize: (a) => `search ${a.entity}${a.eql ? ` where ${a.eql}` : ''}${a.params ? ` with ${JSON.stringify(a.params).slice(0, 300)}` : ''}`,
    run: (s, owner, a) =>
      s.records.list(owner, a.entity, {
        ...(a.eql ? { eql: a.eql } : {}),
        ...(a.params ? { params: a.params } : {}),
        ...(a.sort ? { sort: a.sort } : {}),
        perPage: a.per_page ?? 20,
      }),
  },
  {
    name: 'records_get',
    description: 'Reads one record of an entity by its uuid.',
    args: z.object({ entity, uuid: z.string().min(1) }),
    summarize: (a) => `read ${a.entity} ${a.uuid}`,
    run: (s, owner, a) => s.records.get(owner, a.entity, a.uuid),
  },
  {
    name: 'entities_list',
    description: 'Lists the entities (record types) with their display names and record counts.',
    args: z.object({}),
    summarize: () => 'list entities',
    run: (s, owner) => s.entities.list(owner, 1, 100),
  },
  {
    name: 'workflows_list',
    description: 'Lists the workflows the user can see, optionally searching title and description.',
    args: z.object({ q: z.string().max(200).optional() }),
    summarize: (a) => `list workflows${a.q ? ` matching ${a.q}` : ''}`,
    run: (s, owner, a) => s.workflows.list(owner, { ...(a.q ? { q: a.q } : {}), page: 1, per_page: 20 }),
  },
  {
    name: 'executions_get',
    description: 'Reads one execution (a workflow run) with its timeline.',
    args: z.object({ id: z.coerce.number().int().min(1) }),
    summarize: (a) => `read execution ${a.id}`,
    run: (s, owner, a) => s.executions.view(owner, a.id),
  },
  {
    name: 'records_create',
    description: 'Creates a record of an entity from a field map.',
    args: z.object({ entity, fields }),
    summarize: (a) => `create a ${a.entity} record with ${JSON.stringify(a.fields).slice(0, 300)}`,
    run: (s, owner, a) => s.records.create(owner, a.entity, a.fields),
    check: (s, runner, a) => s.records.checkWrite(runner, a.entity, a.fields, false),
  },
  {
    name: 'records_update',
    description: 'Changes fields of one record.',
    args: z.object({ entity, uuid: z.string().min(1), fields }),
    summarize: (a) => `update ${a.entity} ${a.uuid}: ${JSON.stringify(a.fields).slice(0, 300)}`,
    run: (s, owner, a) => s.records.update(owner, a.entity, a.uuid, a.fields),
    check: (s, runner, a) => s.records.checkWrite(runner, a.entity, a.fields, true),
  },
  {
    name: 'records_delete',
    description: 'Deletes one record.',
    args: z.object({ entity, uuid: z.string().min(1) }),
    summarize: (a) => `delete ${a.entity} ${a.uuid}`,
    run: (s, owner, a) => s.records.remove(owner, a.entity, a.uuid),
    check: async (s, runner, a) => void (await s.entities.requireFor(runner, a.entity, 'delete')),
  },
  {
    name: 'workflow_run',
    description: 'Starts a run of a workflow with a trigger payload.',
    args: z.object({ workflow_id: z.coerce.number().int().min(1), payload: z.unknown().optional() }),
    summarize: (a) => `run workflow ${a.workflow_id} with ${JSON.stringify(a.payload ?? {}).slice(0, 300)}`,
    run: async (s, owner, a) => {
      // The same capability as POST /workflows/{id}/run.
      if (!owner.can('svc_manage_workflows')) throw forbidden('svc_manage_workflows');
      const workflow = await s.workflows.get(owner, a.workflow_id);
      const started = await s.executions.start(workflow, { payload: a.payload ?? {}, trigger: 'manual' }, owner.id);
      return { execution_id: started.executionId };
    },
    check: async (s, runner, a) => {
      if (!runner.can('svc_manage_workflows')) throw forbidden('svc_manage_workflows');
      const workflow = await s.workflows.get(runner, a.workflow_id);
      if (workflow.status === 'archived') throw conflict('workflow_archived', 'The workflow is archived; restore it to run it');
    },
  },
];

const tools: AgentTool[] = definitions.map((t) => {
  const gated = isGatedTool(t.name);
  return { ...t, gated, description: gated ? `${t.description} Waits for a person's approval before it runs.` : t.description };
});

// The gated list and the registry are declared apart (workflow code cannot import this file), so a
// name in one that is missing from the other stops the service at start instead of leaving a
// side effect ungated or a gate that never opens.
const unknownGated = AGENT_GATED_TOOLS.filter((name) => !definitions.some((t) => t.name === name));
if (unknownGated.length) throw new Error(`AGENT_GATED_TOOLS names tools that do not exist: ${unknownGated.join(', ')}`);

export const agentTools: ReadonlyMap<string, AgentTool> = new Map(tools.map((t) => [t.name, t]));

/** The tool list as the provider layer sends it to the model. */
export function toolSpecs(): ToolSpec[] {
  return tools.map((t) => {
    const { $schema: _ignored, ...parameters } = z.toJSONSchema(t.args, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
    return { name: t.name, description: t.description, parameters };
  });
}

export interface ToolOutcome {
  ok: boolean;
  /** What the model reads as the tool's result. */
  result: unknown;
}

/** Runs a tool as `owner`; refusals and bad arguments are results the model can read, not failures. */
export async function runTool(services: AgentToolPorts, owner: Principal, name: string, rawArgs: unknown): Promise<ToolOutcome> {
  const tool = agentTools.get(name);
  if (!tool) return { ok: false, result: { error: CODE.unknown_tool, message: `There is no tool named ${name}` } };
  const args = tool.args.safeParse(rawArgs);
  if (!args.success)
    return {
      ok: false,
      result: { error: CODE.invalid_arguments, message: args.error.issues.map((i) => `${i.path.join('.') || 'args'}: ${i.message}`).join('; ') },
    };
  try {
    return { ok: true, result: await tool.run(services, owner, args.data) };
  } catch (err) {
    if (err instanceof AppError) return { ok: false, result: { error: err.code, message: err.message, ...(err.data ? { data: err.data } : {}) } };
    throw err;
  }
}

/** Summary of a gated call shown to the approver; the raw arguments when they do not parse. */
export function summarizeCall(name: string, rawArgs: unknown): string {
  const tool = agentTools.get(name);
  const args = tool?.args.safeParse(rawArgs);
  return tool && args?.success ? tool.summarize(args.data) : `${name} ${JSON.stringify(rawArgs).slice(0, 300)}`;
}

/** A short, human-readable digest of a tool result for the history and the response. */
export function summarizeResult(outcome: ToolOutcome): string {
  const text = JSON.stringify(outcome.result) ?? 'null';
  const prefix = outcome.ok ? '' : 'error: ';
  return prefix + (text.length > 500 ? `${text.slice(0, 497)}...` : text);
}
