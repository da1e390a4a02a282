import { Document, LineCounter, isMap, isNode, isScalar, isSeq, parseDocument } from 'yaml';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../platform/json-depth.js';
import { REFERENCES } from './references.js';

/**
 * The text of a workflow file: YAML, one workflow per file. Written with a fixed key order and
 * layout, so that the same workflow always gives the same bytes (a file under version control
 * changes only where the workflow did), and read strictly (duplicate keys, custom tags and more
 * than a few aliases refused).
 */

type Json = Record<string, unknown>;

export const FILE_EXTENSIONS = ['.yaml', '.yml'] as const;

/** The comment every exported file starts with. */
export const FILE_HEADER = [
  ' A workflow of the workflow service, as code: edit it, review the change, then apply it.',
  '   svc workflows validate --dir <folder>           checks every file offline',
  '   svc workflows plan --dir <folder> --server URL  shows what would change (POST /api/workflow/v1/plan)',
  '   svc workflows apply --dir <folder> --plan HASH  applies exactly that plan (POST /api/workflow/v1/apply)',
  ' The slug is the identity of the workflow; connections are named by label, workflows by slug,',
  ' users by login. JSON Schema: /api/workflow/v1/workflow.schema.json',
].join('\n');

/** Top-level keys in the order a file shows them; other fields of a definition follow alphabetically, then nodes and edges. */
const WORKFLOW_ORDER = ['slug', 'title', 'description', 'tags', 'status', 'trigger', 'error_workflow', 'shared_with'];
const NODE_ORDER = ['id', 'type', 'name', 'connection', 'connection_id', 'config', 'retry', 'timeout_ms', 'on_error'];
const EDGE_ORDER = ['from', 'to', 'branch'];
const LAST = ['nodes', 'edges'];

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const isEmpty = (v: unknown) => v === undefined || (Array.isArray(v) && v.length === 0) || (isObject(v) && Object.keys(v).length === 0);

function ordered(object: Json, first: readonly string[], last: readonly string[] = []): Json {
  const keys = Object.keys(object);
  const rest = keys.filter((k) => !first.includes(k) && !last.includes(k)).sort();
  const out: Json = {};
  for (const key of [...first.filter((k) => keys.includes(k)), ...rest, ...last.filter((k) => keys.includes(k))]) out[key] = object[key];
  return out;
}

/** Objects with their keys sorted, all the way down (PostgreSQL's jsonb keeps no order of its own). */
function sortedDeep(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedDeep);
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, sortedDeep(value[k])]),
  );
}

function canonicalGraph(graph: Json): Json {
  const out = { ...graph };
  if (Array.isArray(out.nodes)) out.nodes = out.nodes.map((n) => (isObject(n) ? canonicalNode(n) : n));
  if (Array.isArray(out.edges)) out.edges = out.edges.map((e) => (isObject(e) ? ordered(sortedDeep(e) as Json, EDGE_ORDER) : e));
  return out;
}

function canonicalNode(node: Json): Json {
  const out = sortedDeep(node) as Json;
  if (isEmpty(out.config)) delete out.config;
  // An inline body is a graph of nodes: they read in the order of nodes too.
  for (const place of REFERENCES) {
    if (place.kind !== 'graph' || place.scope !== 'node' || (place.types && !place.types.includes(String(out.type)))) continue;
    let holder: unknown = out;
    for (const key of place.at) holder = isObject(holder) ? holder[key] : undefined;
    if (isObject(holder) && isObject(holder[place.file])) holder[place.file] = canonicalGraph(holder[place.file] as Json);
  }
  return ordered(out, NODE_ORDER);
}

/**
 * A workflow in file form, in the file's order, with what equals the default left out (an empty
 * description, tags, sharing, configuration), so that equal workflows give equal files.
 */
export function canonicalFile(file: Json): Json {
  const out: Json = { ...file };
  for (const key of ['description', 'tags', 'shared_with', 'error_workflow']) {
    if (out[key] === '' || out[key] === null || isEmpty(out[key])) delete out[key];
  }
  if (Array.isArray(out.shared_with)) out.shared_with = [...out.shared_with].sort();
  if (isObject(out.trigger)) {
    const trigger = sortedDeep(out.trigger) as Json;
    if (isEmpty(trigger.config)) delete trigger.config;
    out.trigger = ordered(trigger, ['type', 'config']);
  }
  Object.assign(out, canonicalGraph({ nodes: out.nodes, edges: out.edges }));
  if (isEmpty(out.edges)) delete out.edges;
  for (const key of Object.keys(out)) {
    if (out[key] === undefined) delete out[key];
    else if (!WORKFLOW_ORDER.includes(key) && !LAST.includes(key)) out[key] = sortedDeep(out[key]);
  }
  return ordered(out, WORKFLOW_ORDER, LAST);
}

/** The bytes of a workflow file: the header, then the canonical form as block YAML. */
export function renderFile(file: Json): string {
  const doc = new Document(canonicalFile(file));
  doc.commentBefore = FILE_HEADER;
  // lineWidth 0: long strings (expressions) stay on one line; no line folding to vary.
  return doc.toString({ lineWidth: 0, minContentWidth: 0, indentSeq: true });
}

export interface FileProblem {
  /** The file, as the request named it. */
  file: string;
  /** Where in the file, as keys joined with dots (`nodes.2.connection`); '' for the file as a whole. */
  field: string;
  message: string;
  /** The line of the file, when the field is in it. */
  line?: number;
}

export interface ParsedFile {
  path: string;
  /** The file's value, when it is a YAML mapping. */
  value?: Json;
  problems: FileProblem[];
  /** The line a field is on, or of the closest enclosing field that is in the file. */
  lineOf(field: string): number | undefined;
}

/**
 * An upper bound of how deep a YAML text nests, found in one pass without parsing: open flow
 * brackets, and block levels (indentation, each `- ` of a compact sequence one more). The YAML
 * parser recurses per level, and some thousands of levels exhaust its stack or, worse, the
 * process's memory: such a text is refused before it is parsed.
 */
export function nestingBound(content: string): number {
  let deepest = 0;
  let brackets = 0;
  const indents: number[] = [];
  for (const line of content.split('\n')) {
    const prefix = /^(?: |-(?= |$))*/.exec(line)![0];
    if (prefix.length < line.length && !line.slice(prefix.length).startsWith('#')) {
      while (indents.length && indents[indents.length - 1]! >= prefix.length) indents.pop();
      indents.push(prefix.length);
    }
    for (const ch of line) {
      if (ch === '[' || ch === '{') deepest = Math.max(deepest, ++brackets + indents.length);
      else if (ch === ']' || ch === '}') brackets = Math.max(0, brackets - 1);
    }
    deepest = Math.max(deepest, brackets + indents.length + (prefix.match(/-/g)?.length ?? 0));
  }
  return deepest;
}

/** Reads one file: YAML 1.2 (JSON too), one document, a mapping at the top. */
export function parseFile(path: string, content: string): ParsedFile {
  if (nestingBound(content) > MAX_JSON_DEPTH) {
    return { path, problems: [{ file: path, field: '', message: `YAML: nests deeper than ${MAX_JSON_DEPTH} levels` }], lineOf: () => undefined };
  }
  const lines = new LineCounter();
  const doc = parseDocument(content, { lineCounter: lines, uniqueKeys: true, schema: 'core', prettyErrors: true, strict: true, stringKeys: true });
  const lineOf = (field: string): number | undefined => {
    const parts = field ? field.split('.').map((p) => (/^\d+$/.test(p) ? Number(p) : p)) : [];
    // The line of the key naming the field (of the item, in a list).
    for (let n = parts.length; n > 0; n--) {
      const parent = n === 1 ? doc.contents : doc.getIn(parts.slice(0, n - 1), true);
      const part = parts[n - 1];
      let node: unknown;
      if (isMap(parent)) node = parent.items.find((pair) => isScalar(pair.key) && pair.key.value === part)?.key;
      else if (isSeq(parent) && typeof part === 'number') node = parent.items[part];
      if (isNode(node) && node.range) return lines.linePos(node.range[0]).line;
    }
    return undefined;
  };
  const problems: FileProblem[] = [...doc.errors, ...doc.warnings].map((e) => ({
    file: path,
    field: '',
    message: `YAML: ${e.message.split('\n')[0]}`,
    ...(e.linePos?.[0] ? { line: e.linePos[0].line } : {}),
  }));
  if (problems.length) return { path, problems, lineOf };
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 20 });
  } catch (err) {
    return { path, problems: [{ file: path, field: '', message: `YAML: ${(err as Error).message}` }], lineOf };
  }
  if (nestsDeeperThan(value)) return { path, problems: [{ file: path, field: '', message: `YAML: nests deeper than ${MAX_JSON_DEPTH} levels` }], lineOf };
  if (!isObject(value)) {
    return { path, problems: [{ file: path, field: '', message: 'a workflow file holds one mapping (slug, title, trigger, nodes, ...)' }], lineOf };
  }
  return { path, value, problems: [], lineOf };
}
