import { z } from 'zod';
import { named, pascal } from '../http/openapi.js';
import { nodeTypes } from '../nodes/index.js';
import { createWorkflowSchema, nodeSchema, slugPattern } from '../workflow-definitions/workflow.schemas.js';
import { REFERENCES, type Reference, type ReferenceKind } from './references.js';

/**
 * The schema of a workflow file (`WorkflowFile`), derived from the schemas create and PATCH check
 * with: every node type with its configuration, and each place of the reference table written as
 * a name (`connection`, `workflow`, `shared_with` as logins). Editors validate and complete YAML
 * against its JSON Schema (`GET /api/workflow/v1/workflow.schema.json`); the OpenAPI document
 * shows it as the content of a file's text.
 */

const asName: Record<ReferenceKind, () => z.ZodType> = {
  connection: () => z.string().min(1).max(200).describe('A connection, by its label'),
  workflow: () => z.string().regex(slugPattern).describe('A workflow, by its slug'),
  user: () => z.string().min(1).max(60).describe('A user, by login'),
};

/** The same wrappers (optional, nullable, default) around `inner` as around `outer`; `outer` itself when nothing changed. */
function rewrap(outer: z.ZodType, inner: (unwrapped: z.ZodType) => z.ZodType): z.ZodType {
  const wrapped = (unwrapped: z.ZodType, wrap: (s: z.ZodType) => z.ZodType) => {
    const changed = rewrap(unwrapped, inner);
    return changed === unwrapped ? outer : wrap(changed);
  };
  if (outer instanceof z.ZodOptional) return wrapped(outer.unwrap() as z.ZodType, (s) => s.optional());
  if (outer instanceof z.ZodNullable) return wrapped(outer.unwrap() as z.ZodType, (s) => s.nullable());
  // A default of the stored form is no default of the file form: it becomes optional.
  if (outer instanceof z.ZodDefault) return wrapped(outer.unwrap() as z.ZodType, (s) => s.optional());
  return inner(outer);
}

/**
 * `schema` (an object schema, possibly wrapped) with the place at `path` written as the file does;
 * a schema whose shape does not lead there is left as it is (the file is still checked on apply).
 */
function renamed(schema: z.ZodType, path: readonly string[], place: Reference, graphNode: () => z.ZodType): z.ZodType {
  return rewrap(schema, (inner) => {
    if (!(inner instanceof z.ZodObject)) return inner;
    const shape = inner.shape as Record<string, z.ZodType>;
    if (path.length) {
      const child = shape[path[0]!];
      const changed = child && renamed(child, path.slice(1), place, graphNode);
      return changed && changed !== child ? inner.safeExtend({ [path[0]!]: changed }) : inner;
    }
    const stored = shape[place.stored];
    if (!stored) return inner;
    if (place.kind === 'graph') {
      return inner.safeExtend({
        [place.stored]: rewrap(stored, (graph) =>
          graph instanceof z.ZodObject && graph.shape.nodes ? graph.extend({ nodes: z.array(z.lazy(graphNode)).min(1) }) : graph,
        ),
      });
    }
    if (place.storedByName) return inner;
    const name = asName[place.kind]();
    const replacement = rewrap(stored, () => (place.many ? z.array(name) : name));
    return inner.omit({ [place.stored]: true } as Record<string, true> & Record<number, never>).extend({ [place.file]: replacement });
  });
}

function placesFor(scope: Reference['scope'], type?: string): Reference[] {
  return REFERENCES.filter((r) => r.scope === scope && (!r.types || (type !== undefined && r.types.includes(type))));
}

let built: z.ZodType | undefined;
let nodeUnion: z.ZodType | undefined;
const fileNode = (): z.ZodType => (workflowFileSchema(), nodeUnion!);

/**
 * A node type's configuration schema as a file writes it: each place of the reference table in
 * it named (`workflow_id` is `workflow`, a slug), inline bodies holding file nodes; the same
 * schema when the table has no place in it.
 */
export function configInFile(type: string, config: z.ZodType): z.ZodType {
  let out = config;
  for (const place of placesFor('node', type).filter((p) => p.at[0] === 'config')) out = renamed(out, place.at.slice(1), place, fileNode);
  return out;
}

/** The file's schema, built once from the node catalogue. */
export function workflowFileSchema(): z.ZodType {
  if (built) return built;
  const node = fileNode;
  const branches = [...nodeTypes.values()].map((t) => {
    const name = pascal(t.type);
    // The configuration: the type's own (the same named schema as in a definition) unless a place of the table is in it.
    let config = configInFile(t.type, t.configSchema);
    config =
      config === t.configSchema
        ? t.configSchema.meta({ id: `${name}NodeConfig`, description: t.description })
        : config.meta({ id: `${name}FileNodeConfig`, description: `${t.description} In a file, workflows and connections are named by slug and label.` });
    let schema: z.ZodType = nodeSchema.extend({ type: z.literal(t.type), config: t.configSchema.safeParse({}).success ? config.optional() : config });
    for (const place of placesFor('node', t.type).filter((p) => p.at[0] !== 'config')) schema = renamed(schema, place.at, place, node);
    if (t.needsConnection) schema = (schema as z.ZodObject).extend({ connection: asName.connection() });
    return schema.meta({ id: `${name}FileNode`, description: `A \`${t.type}\` node in a workflow file: ${t.description}` });
  });
  nodeUnion = named(z.discriminatedUnion('type', branches as unknown as [z.ZodObject, ...z.ZodObject[]]), 'WorkflowFileNode', {
    description: 'One node of a workflow file: as in a definition, with connections and workflows named by label and slug',
  });
  let file: z.ZodType = createWorkflowSchema.extend({
    slug: z.string().regex(slugPattern).describe('The identity of the workflow on every instance'),
    status: z.enum(['active', 'inactive']).optional().describe("Applied as written; without it, a workflow keeps the server's status (a new one is inactive)"),
    nodes: z.array(nodeUnion).min(1).max(500),
  });
  for (const place of placesFor('workflow')) {
    if (place.kind === 'graph') continue;
    const kind = place.kind;
    // A field the server does not store yet is documented all the same: the format is one for every instance.
    const object = file as z.ZodObject;
    file = object.shape[place.stored]
      ? renamed(file, [], place, node)
      : object.extend({ [place.file]: (place.many ? z.array(asName[kind]()) : asName[kind]().nullable()).optional() });
  }
  built = named(file, 'WorkflowFile', {
    description:
      'A workflow as a file (`<slug>.yaml`): its definition with no instance ids, versions or timestamps; connections by label, workflows by slug, users by login',
    examples: [
      {
        slug: 'greet',
        title: 'Greet',
        status: 'inactive',
        trigger: { type: 'manual' },
        nodes: [{ id: 'hello', type: 'transform', config: { value: { greeting: 'Hello, {{ trigger.name }}' } } }],
      },
    ],
  });
  return built;
}

/** The JSON Schema of a workflow file, from the OpenAPI document's `WorkflowFile` and what it refers to. */
export function fileJsonSchema(document: { components: { schemas: Record<string, unknown> } }): Record<string, unknown> {
  const schemas = document.components.schemas;
  const prefix = '#/components/schemas/';
  const defs: Record<string, unknown> = {};
  const rewrite = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(rewrite);
    if (!value || typeof value !== 'object') return value;
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) {
      // OpenAPI's own keyword; JSON Schema validators do not know it.
      if (key === 'discriminator') continue;
      if (key === '$ref' && typeof v === 'string' && v.startsWith(prefix)) {
        const name = v.slice(prefix.length);
        if (!(name in defs)) {
          defs[name] = true;
          defs[name] = rewrite(schemas[name]);
        }
        out.$ref = `#/$defs/${name}`;
      } else out[key] = rewrite(v);
    }
    return out;
  };
  const root = rewrite({ $ref: `${prefix}WorkflowFile` });
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title: 'Workflow file',
    description: 'One workflow of the workflow service as a YAML file; apply a folder of them with `svc workflows plan` and `svc workflows apply`.',
    ...(root as Record<string, unknown>),
    $defs: Object.fromEntries(
      Object.keys(defs)
        .sort()
        .map((k) => [k, defs[k]]),
    ),
  };
}
