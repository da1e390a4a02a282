import { createWorkflowSchema, type CreateWorkflow } from '../workflow-definitions/workflow.schemas.js';
import { validateGraph } from '../workflow-definitions/graph-validator.js';
import { nodeTypes } from '../nodes/index.js';
import type { Graph, GraphNode } from '../../workflows/defs.js';
import { REFERENCES, fileFieldOf, idsForNames, namesForIds, type IdOf, type ReferenceKind } from './references.js';
import { canonicalFile, type FileProblem, type ParsedFile } from './workflow-file.js';

/**
 * A workflow file against a workflow definition: which fields a file holds, how a stored
 * workflow becomes a file, and how a file becomes the definition that create and PATCH take,
 * checked by the same schema. Shared by the server (export, plan, apply) and the offline check.
 */

type Json = Record<string, unknown>;

/** The fields of a definition the server takes, as its create schema says. */
const definitionFields = () => new Set(Object.keys(createWorkflowSchema.shape));

/** Fields of the definition a file names by the table (`error_workflow_id` is `error_workflow`). */
const renamed = () => REFERENCES.filter((r) => r.scope === 'workflow' && r.stored !== r.file);

/**
 * Whether the server stores a workflow field the table names. A field the definition does not
 * have (yet) is refused in a file rather than dropped: this is the one switch, and it turns on by
 * itself when the create schema gains the field.
 */
export const takesField = (stored: string) => definitionFields().has(stored);

/** The top-level fields a workflow file may hold. */
export function fileFields(): string[] {
  const fields = definitionFields();
  for (const r of renamed()) {
    fields.delete(r.stored);
    fields.add(r.file);
  }
  return [...fields];
}

/** A stored workflow (a row of `workflows`) as a definition: the fields the create schema takes, and status. */
export function storedDefinition(row: Json): Json {
  const out: Json = {};
  for (const field of definitionFields()) if (row[field] !== undefined) out[field] = row[field];
  return out;
}

export interface Checked {
  /** The definition to create or PATCH with, parsed by the create schema (its defaults filled in). */
  definition?: CreateWorkflow;
  /** The file form of that definition, canonical: what the server would export after applying it. */
  normalised?: Json;
  problems: FileProblem[];
}

/**
 * Checks a parsed file and turns it into a definition: its fields, its names resolved by `idOf`
 * (`current`, the stored definition of the same slug, keeps ids whose names still fit), and the
 * create schema. `status` stands in when the file has none (the server's: an omitted status keeps it).
 */
export function checkFile(parsed: ParsedFile, idOf: IdOf, options: { current?: Json; status: 'active' | 'inactive' }): Checked {
  const file = parsed.value;
  const problem = (field: string, message: string): FileProblem => ({ file: parsed.path, field, message, ...lineOf(parsed, field) });
  if (!file) return { problems: parsed.problems };
  const problems: FileProblem[] = [];
  const allowed = fileFields();
  for (const key of Object.keys(file)) {
    if (allowed.includes(key)) continue;
    // A field a file names by another name (`error_workflow_id` is `error_workflow`): say which.
    const place = renamed().find((r) => r.stored === key);
    problems.push(
      problem(
        key,
        place ? `a file names workflows by slug, not by id: write \`${place.file}: ...\` instead` : `not a field of a workflow file (${allowed.join(', ')})`,
      ),
    );
  }
  if (typeof file.slug !== 'string') problems.push(problem('slug', 'a file names its workflow by slug: `slug: <lower-case-letters-digits-dashes>`'));
  const input: Json = Object.fromEntries(Object.entries(file).filter(([key]) => allowed.includes(key)));
  for (const r of renamed()) {
    if (!takesField(r.stored) && input[r.file] !== undefined && input[r.file] !== null) {
      problems.push(problem(r.file, `this server does not take \`${r.file}\` yet`));
    }
    if (!takesField(r.stored)) delete input[r.file];
  }
  // Names resolved, and remembered, so that the definition reads back as the same names.
  const names = new Map<string, string>();
  const remembering: IdOf = (kind, name, hint) => {
    const found = idOf(kind, name, hint);
    if (typeof found === 'number') names.set(`${kind}:${found}`, name);
    return found;
  };
  const mapped = idsForNames(input, remembering, options.current);
  problems.push(...mapped.problems.map((p) => problem(p.field, p.message)));
  const parsedDefinition = createWorkflowSchema.safeParse({ ...mapped.definition, status: input.status ?? options.status });
  if (!parsedDefinition.success) {
    for (const issue of parsedDefinition.error.issues) {
      const path = issue.path.map(String).join('.');
      const field = issue.code === 'unrecognized_keys' ? [path, ...issue.keys].filter(Boolean).join('.') : path;
      problems.push(problem(fileFieldOf(field), issue.code === 'unrecognized_keys' ? 'is not a known field' : issue.message));
    }
  }
  if (!parsedDefinition.success) return { problems };
  const definition = parsedDefinition.data;
  // The graph checks of create and PATCH, but not again at a place whose name already failed.
  const reported = problems.map((p) => fileFieldOf(p.field));
  problems.push(...checkGraph(parsed, definition).filter((p) => !reported.some((field) => p.field === field || p.field.startsWith(`${field}.`))));
  if (problems.length) return { problems };
  const normalised = canonicalFile(namesForIds(definition as unknown as Json, (kind: ReferenceKind, id: number) => names.get(`${kind}:${id}`)));
  return { definition, normalised, problems };
}

/** The graph checks of create and PATCH that need no database (node types, configurations, edges, cycles, expressions). */
export function checkGraph(parsed: ParsedFile, definition: CreateWorkflow): FileProblem[] {
  const graph: Graph = { nodes: definition.nodes as GraphNode[], edges: definition.edges };
  return validateGraph(graph, definition.trigger, nodeTypes).map((p) => {
    const field = fileFieldOf(p.field);
    return { file: parsed.path, field, message: p.message, ...lineOf(parsed, field) };
  });
}

function lineOf(parsed: ParsedFile, field: string): { line?: number } {
  const line = parsed.lineOf(field);
  return line === undefined ? {} : { line };
}
