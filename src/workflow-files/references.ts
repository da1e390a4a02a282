/**
 * Where a workflow definition names another thing of its instance, and how a workflow file names
 * the same thing instead: connections by label, workflows by slug, users by login. A file carries
 * no instance id, so that the same file means the same workflow on every instance.
 *
 * `REFERENCES` is the one table of those places: a node type or workflow field that names a
 * connection, a workflow or a user is one line here, and export, plan, apply, the offline check
 * and the file's JSON Schema all follow it.
 */

export type ReferenceKind = 'connection' | 'workflow' | 'user';

export interface Reference {
  kind: ReferenceKind | 'graph';
  /** On the workflow itself, or in each node (nodes of inline bodies included). */
  scope: 'workflow' | 'node';
  /** The object that holds it, as keys from the workflow or node (`[]`: the workflow or node itself). */
  at: readonly string[];
  /** Its key in the stored definition (an id, a list of ids, or a name already). */
  stored: string;
  /** Its key in a file (a label, slug or login, or a list of them). */
  file: string;
  /** A list rather than one. */
  many?: boolean;
  /** The stored definition names it as a file does (logins): carried as written, checked to exist on apply. */
  storedByName?: boolean;
  /** Only in nodes of these types, because other types keep their own data under the same key. */
  types?: readonly string[];
}

/**
 * Every place a definition names a connection, a workflow or a user. `graph` is an inline body
 * (`{nodes, edges}`) whose nodes are read with this same table.
 */
export const REFERENCES: readonly Reference[] = [
  { kind: 'user', scope: 'workflow', at: [], stored: 'shared_with', file: 'shared_with', many: true },
  { kind: 'workflow', scope: 'workflow', at: [], stored: 'error_workflow_id', file: 'error_workflow' },
  { kind: 'connection', scope: 'node', at: [], stored: 'connection_id', file: 'connection' },
  { kind: 'connection', scope: 'node', at: ['config', 'notify'], stored: 'connection_id', file: 'connection' },
  { kind: 'workflow', scope: 'node', at: ['config'], stored: 'workflow_id', file: 'workflow' },
  { kind: 'user', scope: 'node', at: ['config', 'approvers'], stored: 'users', file: 'users', many: true, storedByName: true },
  { kind: 'graph', scope: 'node', at: ['config'], stored: 'body', file: 'body', types: ['for_each'] },
];

type Json = Record<string, unknown>;

export interface FieldProblem {
  field: string;
  message: string;
}

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const isId = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0;

function holder(root: Json, at: readonly string[]): Json | undefined {
  let value: unknown = root;
  for (const key of at) value = isObject(value) ? value[key] : undefined;
  return isObject(value) ? value : undefined;
}

const placesOf = (scope: Reference['scope'], type?: unknown) =>
  REFERENCES.filter((r) => r.scope === scope && (!r.types || (typeof type === 'string' && r.types.includes(type))));

const nounOf: Record<ReferenceKind, string> = { connection: 'label', workflow: 'slug', user: 'login' };

/** A deep copy of plain JSON. */
export const copy = <T>(value: T): T => structuredClone(value);

// ---------------------------------------------------------------------------------------------
// Stored definition -> file

/** The name of a stored id, or undefined when it names nothing the caller may see (it stays an id). */
export type NameOf = (kind: ReferenceKind, id: number) => string | undefined;

function namesIn(target: Json, places: readonly Reference[], nameOf: NameOf, visitGraph: (graph: Json) => void) {
  for (const place of places) {
    const object = holder(target, place.at);
    if (!object || !(place.stored in object)) continue;
    const value = object[place.stored];
    if (place.kind === 'graph') {
      if (isObject(value)) visitGraph(value);
      continue;
    }
    if (place.storedByName) continue;
    // None named (an error workflow left unset): the file's field says none too.
    if (value === null && !place.many) {
      delete object[place.stored];
      object[place.file] = null;
      continue;
    }
    const kind = place.kind;
    const names = place.many
      ? Array.isArray(value) && value.every(isId)
        ? value.map((id) => nameOf(kind, id))
        : undefined
      : isId(value)
        ? [nameOf(kind, value)]
        : undefined;
    if (!names || names.some((n) => n === undefined)) continue;
    delete object[place.stored];
    object[place.file] = place.many ? names : names[0];
  }
}

function nodesToFile(nodes: unknown, nameOf: NameOf): void {
  if (!Array.isArray(nodes)) return;
  for (const node of nodes) {
    if (!isObject(node)) continue;
    namesIn(node, placesOf('node', node.type), nameOf, (graph) => nodesToFile(graph.nodes, nameOf));
  }
}

/** The file form of a stored definition: every id the table names replaced by its name (a copy). */
export function namesForIds(definition: Json, nameOf: NameOf): Json {
  const out = copy(definition);
  namesIn(out, placesOf('workflow'), nameOf, () => undefined);
  nodesToFile(out.nodes, nameOf);
  return out;
}

// ---------------------------------------------------------------------------------------------
// File -> stored definition

/** An id for a name, or a sentence saying why there is none. `current`: the id the same place holds on the server now. */
export type IdOf = (kind: ReferenceKind, name: string, hint: { field: string; current?: number | undefined; workflow: Json }) => number | { problem: string };

interface Resolving {
  idOf: IdOf;
  workflow: Json;
  problems: FieldProblem[];
}

/** One place of `object`: its name (or names) replaced by the id, or a problem at `field`. */
function resolvePlace(object: Json, place: Reference & { kind: ReferenceKind }, currentValue: unknown, field: string, r: Resolving): void {
  const { kind } = place;
  const value = object[place.file];
  const one = (name: unknown, at: string, now: unknown): number | undefined => {
    if (typeof name !== 'string' || !name) {
      r.problems.push({ field: at, message: `expected a ${kind} ${nounOf[kind]} (a string)` });
      return undefined;
    }
    const found = r.idOf(kind, name, { field: at, current: isId(now) ? now : undefined, workflow: r.workflow });
    if (typeof found === 'number') return found;
    r.problems.push({ field: at, message: found.problem });
    return undefined;
  };
  const store = (stored: unknown) => {
    if (place.storedByName) return;
    if (place.file !== place.stored) delete object[place.file];
    object[place.stored] = stored;
  };
  if (place.many) {
    if (!Array.isArray(value)) {
      r.problems.push({ field, message: `expected a list of ${kind} ${nounOf[kind]}s` });
      return;
    }
    const ids = value.map((name, i) => one(name, `${field}.${i}`, undefined));
    if (ids.every((id) => id !== undefined)) store(ids);
    else if (!place.storedByName) delete object[place.file];
    return;
  }
  // null: an explicit "none".
  const id = value === null ? null : one(value, field, currentValue);
  if (id !== undefined) store(id);
  // Left out, so that the definition's own checks do not report the same place again.
  else if (!place.storedByName) delete object[place.file];
}

function idsIn(
  target: Json,
  current: Json | undefined,
  places: readonly Reference[],
  prefix: string,
  r: Resolving,
  visitGraph: (graph: Json, current: Json | undefined, prefix: string) => void,
) {
  const field = (at: readonly string[], key: string) => [prefix, ...at, key].filter(Boolean).join('.');
  for (const place of places) {
    const object = holder(target, place.at);
    if (!object) continue;
    const currentValue = current ? holder(current, place.at)?.[place.stored] : undefined;
    if (place.kind === 'graph') {
      const graph = object[place.stored];
      if (isObject(graph)) visitGraph(graph, isObject(currentValue) ? currentValue : undefined, field(place.at, place.stored));
      continue;
    }
    const kind = place.kind;
    const stored = object[place.stored];
    // An instance id in a file means something else on every other instance.
    const idWritten = place.many ? Array.isArray(stored) && stored.some((v) => typeof v === 'number') : typeof stored === 'number';
    if (place.file !== place.stored && idWritten) {
      r.problems.push({
        field: field(place.at, place.stored),
        message: `a file names ${kind}s by ${nounOf[kind]}, not by id: write \`${place.file}: ${place.many ? '[...]' : '...'}\` instead`,
      });
    }
    if (place.file in object) resolvePlace(object, { ...place, kind }, currentValue, field(place.at, place.file), r);
  }
}

function nodesToDefinition(nodes: unknown, current: unknown, prefix: string, idOf: IdOf, workflow: Json, problems: FieldProblem[]): void {
  if (!Array.isArray(nodes)) return;
  const byId = new Map<unknown, Json>((Array.isArray(current) ? current : []).filter(isObject).map((n) => [n.id, n]));
  nodes.forEach((node, i) => {
    if (!isObject(node)) return;
    const now = byId.get(node.id);
    idsIn(node, now, placesOf('node', node.type), `${prefix}${i}`, { idOf, workflow, problems }, (graph, currentGraph, at) =>
      nodesToDefinition(graph.nodes, currentGraph?.nodes, `${at}.nodes.`, idOf, workflow, problems),
    );
  });
}

/**
 * The stored form of a file's definition (a copy): every name the table places resolved to an id
 * through `idOf`, and a problem for each name that resolves to none and each instance id written
 * where a name belongs. `current` is the stored definition of the same workflow, if any: a place
 * keeps its id when its name still fits it (two connections may share a label).
 */
export function idsForNames(file: Json, idOf: IdOf, current?: Json): { definition: Json; problems: FieldProblem[] } {
  const out = copy(file);
  const problems: FieldProblem[] = [];
  idsIn(out, current, placesOf('workflow'), '', { idOf, workflow: file, problems }, () => undefined);
  nodesToDefinition(out.nodes, current?.nodes, 'nodes.', idOf, file, problems);
  return { definition: out, problems };
}

/**
 * The field of a file that a problem found in the stored definition is about: `nodes.2.connection_id`
 * is `nodes.2.connection` in the file. Fields the table does not rename stay as they are.
 */
export function fileFieldOf(field: string): string {
  let out = field;
  for (const place of REFERENCES) {
    if (place.stored === place.file) continue;
    const at = place.at.map((k) => `${k}\\.`).join('');
    const pattern =
      place.scope === 'node' ? new RegExp(`((?:^|\\.)nodes\\.\\d+\\.${at})${place.stored}(?=\\.|$)`, 'g') : new RegExp(`^(${at})${place.stored}(?=\\.|$)`);
    out = out.replace(pattern, `$1${place.file}`);
  }
  return out;
}

/** Every name of `kind` a file mentions, for loading what they resolve to in one query each. */
export function mentionedNames(file: Json): Record<ReferenceKind, Set<string>> {
  const found: Record<ReferenceKind, Set<string>> = { connection: new Set(), workflow: new Set(), user: new Set() };
  const collect = (target: Json, places: readonly Reference[]) => {
    for (const place of places) {
      const object = holder(target, place.at);
      if (!object) continue;
      if (place.kind === 'graph') {
        const graph = object[place.stored];
        if (isObject(graph) && Array.isArray(graph.nodes)) for (const n of graph.nodes) if (isObject(n)) collect(n, placesOf('node', n.type));
        continue;
      }
      const value = object[place.file];
      for (const v of Array.isArray(value) ? value : [value]) if (typeof v === 'string') found[place.kind].add(v);
    }
  };
  collect(file, placesOf('workflow'));
  if (Array.isArray(file.nodes)) for (const n of file.nodes) if (isObject(n)) collect(n, placesOf('node', n.type));
  return found;
}

/** Every id of `kind` a stored definition names, for loading their names in one query each. */
export function mentionedIds(definition: Json): Record<ReferenceKind, Set<number>> {
  const found: Record<ReferenceKind, Set<number>> = { connection: new Set(), workflow: new Set(), user: new Set() };
  const collect = (target: Json, places: readonly Reference[]) => {
    for (const place of places) {
      const object = holder(target, place.at);
      if (!object) continue;
      const value = object[place.stored];
      if (place.kind === 'graph') {
        if (isObject(value) && Array.isArray(value.nodes)) for (const n of value.nodes) if (isObject(n)) collect(n, placesOf('node', n.type));
        continue;
      }
      if (place.storedByName) continue;
      for (const v of Array.isArray(value) ? value : [value]) if (isId(v)) found[place.kind].add(v);
    }
  };
  collect(definition, placesOf('workflow'));
  if (Array.isArray(definition.nodes)) for (const n of definition.nodes) if (isObject(n)) collect(n, placesOf('node', n.type));
  return found;
}
