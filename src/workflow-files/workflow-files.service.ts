import { createHash } from 'node:crypto';
import type { Principal } from '../auth/auth.service.js';
import type { ConnectionService } from '../connections/connection.service.js';
import type { Queryable, Sql, Transaction } from '../db/sql.js';
import { AppError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import type { WorkflowSchedules } from '../workflow-definitions/workflow.schedules.js';
import { workflowVisibility, workflowVisibleTo, type WorkflowService } from '../workflow-definitions/workflow.service.js';
import type { CreateWorkflow, UpdateWorkflow, WorkflowRow } from '../workflow-definitions/workflow.schemas.js';
import { checkFile, storedDefinition, type Checked } from './definition.js';
import { fileFieldOf, mentionedIds, mentionedNames, namesForIds, type IdOf, type NameOf, type ReferenceKind } from './references.js';
import { unifiedDiff } from './unified-diff.js';
import { parseFile, renderFile, type FileProblem, type ParsedFile } from './workflow-file.js';

type Json = Record<string, unknown>;
type Row = WorkflowRow & Json;

export interface WorkflowFileText {
  path: string;
  content: string;
}

export interface FilesRequest {
  files: WorkflowFileText[];
  prune?: boolean | undefined;
  tag?: string | undefined;
}

export type ChangeAction = 'create' | 'update' | 'archive' | 'unchanged';

export interface Change {
  slug: string;
  path: string;
  action: ChangeAction;
  /** The workflow's id on this server (after apply, that of a created one too); null for one a plan would create. */
  id: number | null;
  /** Unified diff of the file as the server has it (`a/`) against the file given (`b/`); '' when unchanged. */
  diff: string;
}

export interface Plan {
  plan_hash: string;
  changes: Change[];
}

export interface Applied extends Plan {
  /** Schedule changes Temporal refused after the commit: the workflows are stored, their schedules lag. */
  warnings: { slug: string; message: string }[];
}

/** Serialises plans and applies: two CI jobs applying at once see each other's result, never half of it. */
const FILES_LOCK = 0x77_66_69_6c;
/** Stand-in ids of the workflows a plan would create, until apply takes real ones. */
const PLACEHOLDER_BASE = 2_100_000_000;

interface Planned extends Change {
  row?: Row;
  parsed?: ParsedFile;
  checked?: Checked;
  /** The definition differs from the stored one (beyond status). */
  definitionChanged: boolean;
  /** The status the workflow ends with. */
  status: 'active' | 'inactive';
}

interface Prepared {
  changes: Planned[];
  problems: FileProblem[];
  hash: string;
  /** Resolves names for a file once the ids of created workflows are known. */
  idOf(planned: Planned, created: Map<string, number>): IdOf;
}

/** JSON with sorted keys: two equal definitions, whatever order PostgreSQL gave their keys in. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const object = value as Json;
    return `{${Object.keys(object)
      .filter((k) => object[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(object[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

const withoutStatus = (definition: Json) => ({ ...definition, status: undefined });

/** A 400 listing every problem of every file: nothing was applied. */
export function invalidFiles(problems: FileProblem[]): AppError {
  const first = problems
    .slice(0, 3)
    .map((p) => `${p.file}${p.line ? `:${p.line}` : ''}${p.field ? ` ${p.field}` : ''}: ${p.message}`)
    .join('; ');
  return new AppError('validation_failed', `${problems.length} problem(s) in the files, nothing applied: ${first}${problems.length > 3 ? '; ...' : ''}`, {
    errors: problems,
  });
}

/** Schedule changes held until the transaction commits, then made in order. */
class DeferredSchedules implements Pick<WorkflowSchedules, 'sync' | 'pause' | 'remove'> {
  private readonly steps: { op: 'sync' | 'pause' | 'remove'; row: WorkflowRow }[] = [];
  async sync(row: WorkflowRow) {
    this.steps.push({ op: 'sync', row });
  }
  async pause(row: WorkflowRow) {
    this.steps.push({ op: 'pause', row });
  }
  async remove(row: WorkflowRow) {
    this.steps.push({ op: 'remove', row });
  }
  async applyTo(schedules: WorkflowSchedules, logger: Logger): Promise<Applied['warnings']> {
    const warnings: Applied['warnings'] = [];
    for (const { op, row } of this.steps) {
      try {
        await schedules[op](row);
      } catch (err) {
        logger.warn({ err, workflow_id: row.id }, 'workflow files: schedule change failed after commit');
        warnings.push({
          slug: row.slug,
          message: `stored, but its Temporal schedule was not updated (${(err as Error).message}); POST /workflows/${row.id}/activate (or deactivate) to retry`,
        });
      }
    }
    return warnings;
  }
}

class RolledBack extends Error {
  constructor(readonly plan: Plan) {
    super('plan: rolled back');
  }
}

/**
 * Workflows as files: export the workflows a caller sees as one YAML file each, plan what a set of
 * files would change, and apply it all or nothing, acting for the caller with the rights of
 * create and PATCH (the writes go through WorkflowService inside one transaction).
 */
export class WorkflowFilesService {
  constructor(
    private readonly sql: Sql,
    private readonly workflows: WorkflowService,
    private readonly schedules: WorkflowSchedules,
    private readonly connections: Pick<ConnectionService, 'usableBy'>,
    private readonly logger: Logger,
  ) {}

  /** The caller's workflows (not archived), filtered by tag and search, as files. */
  async export(principal: Principal, filter: { tag?: string | undefined; q?: string | undefined }): Promise<{ files: WorkflowFileText[] }> {
    const [visible, params] = workflowVisibility(principal);
    const where = [visible, `w.status <> 'archived'`];
    const args = [...params];
    if (filter.tag) {
      where.push('? = any(w.tags)');
      args.push(filter.tag);
    }
    if (filter.q) {
      where.push(`w.search @@ websearch_to_tsquery('english', ?)`);
      args.push(filter.q);
    }
    const rows = await this.sql.query<Row>(`select w.* from workflows w where ${where.join(' and ')} order by w.slug`, args);
    const nameOf = await this.namesOf(this.sql, principal, rows);
    return { files: rows.map((row) => ({ path: `${row.slug}.yaml`, content: this.render(row, nameOf) })) };
  }

  /** What applying the files would change, with a diff per workflow; changes nothing (its writes are rolled back). */
  async plan(principal: Principal, request: FilesRequest): Promise<Plan> {
    try {
      await this.sql.transaction(async (tx) => {
        throw new RolledBack(await this.run(tx, principal, request, new DeferredSchedules(), { apply: false }));
      });
    } catch (err) {
      if (err instanceof RolledBack) return err.plan;
      throw err;
    }
    throw new Error('unreachable');
  }

  /** Applies the files all or nothing; with `plan_hash`, only while the plan is still the one that hash names. */
  async apply(principal: Principal, request: FilesRequest & { plan_hash?: string | undefined }): Promise<Applied> {
    const deferred = new DeferredSchedules();
    const plan = await this.sql
      .transaction((tx) => this.run(tx, principal, request, deferred, { apply: true, planHash: request.plan_hash }))
      // Its writes dropped the workflows kept for webhook calls before they were committed: again now.
      .finally(() => this.workflows.changed());
    return { ...plan, warnings: await deferred.applyTo(this.schedules, this.logger) };
  }

  /** A plan and an apply are the same writes; a plan's are rolled back by its caller. */
  private async run(
    tx: Transaction,
    principal: Principal,
    request: FilesRequest,
    deferred: DeferredSchedules,
    mode: { apply: false } | { apply: true; planHash?: string | undefined },
  ): Promise<Plan> {
    const planHash = mode.apply ? mode.planHash : undefined;
    await tx.query('select pg_advisory_xact_lock(?)', [FILES_LOCK]);
    const prepared = await this.prepare(tx, principal, request);
    if (planHash !== undefined && planHash !== prepared.hash) {
      throw new AppError('plan_stale', 'The workflows or the files changed since that plan was made; nothing was applied. Plan again and review it.', {
        plan_hash: prepared.hash,
      });
    }
    // The files that passed go through the writes too (rolled back), so that every problem is listed at once.
    const written = await this.write(tx, principal, prepared, deferred);
    const problems = [...prepared.problems, ...written.problems];
    if (problems.length) throw invalidFiles(problems);
    return {
      plan_hash: prepared.hash,
      // A plan's writes are rolled back: the ids it took name nothing.
      changes: prepared.changes.map(({ slug, path, action, id, diff }) => ({
        slug,
        path,
        action,
        id: id ?? (mode.apply ? (written.created.get(slug) ?? null) : null),
        diff,
      })),
    };
  }

  private render(row: Row, nameOf: NameOf): string {
    return renderFile(namesForIds(storedDefinition(row), nameOf));
  }

  /** Names of every id the rows' definitions hold: connection labels, slugs of workflows the caller sees, logins. */
  private async namesOf(db: Queryable, principal: Principal, rows: Row[]): Promise<NameOf> {
    const ids: Record<ReferenceKind, Set<number>> = { connection: new Set(), workflow: new Set(), user: new Set() };
    for (const row of rows) {
      const found = mentionedIds(storedDefinition(row));
      for (const kind of Object.keys(ids) as ReferenceKind[]) for (const id of found[kind]) ids[kind].add(id);
    }
    const [visible, params] = workflowVisibility(principal);
    const load = async (kind: ReferenceKind, text: string, extra: unknown[] = []) =>
      ids[kind].size ? new Map((await db.query<{ id: number; name: string }>(text, [[...ids[kind]], ...extra])).map((r) => [r.id, r.name])) : new Map();
    const names = {
      connection: await load('connection', 'select id, label as name from connections where id = any(?)'),
      workflow: await load('workflow', `select w.id, w.slug as name from workflows w where w.id = any(?) and ${visible}`, params),
      user: await load('user', 'select id, login as name from users where id = any(?)'),
    };
    return (kind, id) => names[kind].get(id);
  }

  /** Reads the files and the server's state and works out each change, its diff and the plan's hash. */
  private async prepare(tx: Transaction, principal: Principal, request: FilesRequest): Promise<Prepared> {
    const problems: FileProblem[] = [];
    const files = this.readFiles(request, problems);
    const slugs = [...files.keys()];
    const rows = new Map(
      (
        await tx.query<Row>(`select w.*, u.login as owner_login from workflows w join users u on u.id = w.owner_id where w.slug = any(?) for update of w`, [
          slugs,
        ])
      ).map((r) => [r.slug, r]),
    );
    for (const [slug, parsed] of files) {
      const row = rows.get(slug);
      if (row && !workflowVisibleTo(principal, row)) {
        problems.push({ file: parsed.path, field: 'slug', message: `the slug ${slug} is taken by a workflow you cannot see`, ...line(parsed, 'slug') });
        files.delete(slug);
      }
    }
    const pruned = request.prune ? await this.pruneScope(tx, principal, request.tag, slugs) : [];
    const resolve = await this.resolver(tx, principal, files, rows, pruned);
    const nameOf = await this.namesOf(tx, principal, [...rows.values(), ...pruned]);
    const changes: Planned[] = [];
    const newSlugs = slugs.filter((s) => !rows.has(s)).sort();
    const placeholders = new Map(newSlugs.map((s, i) => [s, PLACEHOLDER_BASE + i]));
    for (const [slug, parsed] of files) {
      const row = rows.get(slug);
      const planned = this.planFile(parsed, row, resolve.forFile(row, placeholders), nameOf);
      problems.push(...(planned.checked?.problems ?? []));
      changes.push({ ...planned, slug });
    }
    for (const row of pruned) {
      const before = this.render(row, nameOf);
      changes.push({
        slug: row.slug,
        path: `${row.slug}.yaml`,
        action: 'archive',
        id: row.id,
        diff: unifiedDiff(before, '', `a/${row.slug}.yaml`, '/dev/null'),
        row,
        definitionChanged: false,
        status: 'inactive',
      });
    }
    changes.sort((a, b) => (a.slug < b.slug ? -1 : a.slug > b.slug ? 1 : 0));
    const hash = createHash('sha256')
      .update(
        canonicalJson({
          caller: principal.id,
          prune: request.prune ?? false,
          tag: request.tag ?? null,
          changes: changes.map((c) => ({ slug: c.slug, path: c.path, action: c.action, id: c.id, diff: c.diff, definition: c.checked?.definition ?? null })),
        }),
      )
      .digest('hex');
    return { changes, problems, hash, idOf: (planned, created) => resolve.forFile(planned.row, created) };
  }

  /** Parses every file; duplicate paths and slugs, a tag the file lacks, prune without files: problems. */
  private readFiles(request: FilesRequest, problems: FileProblem[]): Map<string, ParsedFile> {
    const bySlug = new Map<string, ParsedFile>();
    const paths = new Set<string>();
    if (request.prune && !request.files.length) {
      problems.push({ file: '', field: 'files', message: 'prune with no files would archive every workflow in scope; send the files, or archive with DELETE' });
    }
    for (const { path, content } of request.files) {
      if (paths.has(path)) problems.push({ file: path, field: '', message: 'two files have this path' });
      paths.add(path);
      const parsed = parseFile(path, content);
      problems.push(...parsed.problems);
      if (!parsed.value) continue;
      const slug = parsed.value.slug;
      if (typeof slug !== 'string') {
        problems.push({
          file: path,
          field: 'slug',
          message: 'a file names its workflow by slug: `slug: <lower-case letters, digits, dashes>`',
          ...line(parsed, 'slug'),
        });
        continue;
      }
      const other = bySlug.get(slug);
      if (other) {
        problems.push({ file: path, field: 'slug', message: `${other.path} has the same slug; one file per workflow`, ...line(parsed, 'slug') });
        continue;
      }
      const tags = parsed.value?.tags;
      if (request.tag && !(Array.isArray(tags) && tags.includes(request.tag))) {
        problems.push({
          file: path,
          field: 'tags',
          message: `the files are applied for tag ${request.tag}, which this file's tags lack`,
          ...line(parsed, 'tags'),
        });
      }
      bySlug.set(slug, parsed);
    }
    return bySlug;
  }

  /**
   * Workflows `prune` archives when the files lack them: those the caller may see with `tag`, or
   * without a tag those the caller owns; never an archived one.
   */
  private async pruneScope(tx: Transaction, principal: Principal, tag: string | undefined, slugs: string[]): Promise<Row[]> {
    const [visible, params] = workflowVisibility(principal);
    const scope = tag ? '? = any(w.tags)' : 'w.owner_id = ?';
    return tx.query<Row>(
      `select w.*, u.login as owner_login from workflows w join users u on u.id = w.owner_id
        where ${visible} and ${scope} and w.status <> 'archived' and not (w.slug = any(?)) order by w.slug for update of w`,
      [...params, tag ?? principal.id, slugs],
    );
  }

  /** The change one file makes: its definition checked and resolved, compared with the stored one. */
  private planFile(parsed: ParsedFile, row: Row | undefined, idOf: IdOf, nameOf: NameOf): Omit<Planned, 'slug'> {
    const path = parsed.path;
    const status = row && row.status !== 'archived' ? (row.status as 'active' | 'inactive') : 'inactive';
    const checked = checkFile(parsed, idOf, { ...(row ? { current: storedDefinition(row) } : {}), status });
    const base = { path, parsed, checked, id: row?.id ?? null, ...(row ? { row } : {}) };
    if (!checked.definition || !checked.normalised) return { ...base, action: 'unchanged', diff: '', definitionChanged: false, status };
    const target = checked.definition.status;
    const given = renderFile(checked.normalised);
    if (!row) return { ...base, action: 'create', diff: unifiedDiff('', given, '/dev/null', `b/${path}`), definitionChanged: true, status: target };
    const stored = storedDefinition(row);
    const server = renderFile(namesForIds(stored, nameOf));
    const definitionChanged = canonicalJson(withoutStatus(stored)) !== canonicalJson(withoutStatus(checked.definition as unknown as Json));
    const changed = definitionChanged || row.status !== target;
    let diff = unifiedDiff(server, given, `a/${path}`, `b/${path}`);
    if (changed && !diff) diff = `# ${path}: the same file, but its names now resolve to other ids (a connection relabelled, or one no longer usable)\n`;
    return { ...base, action: changed ? 'update' : 'unchanged', diff, definitionChanged, status: target };
  }

  /** Loads what the files' names can resolve to, and answers an `IdOf` per file. */
  private async resolver(tx: Transaction, principal: Principal, files: Map<string, ParsedFile>, rows: Map<string, Row>, pruned: Row[]) {
    const names: Record<ReferenceKind, Set<string>> = { connection: new Set(), workflow: new Set(), user: new Set() };
    for (const parsed of files.values()) {
      if (!parsed.value) continue;
      const found = mentionedNames(parsed.value);
      for (const kind of Object.keys(names) as ReferenceKind[]) for (const n of found[kind]) names[kind].add(n);
    }
    const connections = await tx.query<{ id: number; label: string; owner_id: number }>('select id, label, owner_id from connections where label = any(?)', [
      [...names.connection],
    ]);
    const referenced = new Map(
      (await tx.query<Row>('select w.* from workflows w where w.slug = any(?)', [[...names.workflow].filter((s) => !files.has(s))])).map((r) => [r.slug, r]),
    );
    const users = new Map(
      (await tx.query<{ id: number; login: string }>('select id, login from users where login = any(?)', [[...names.user]])).map((u) => [u.login, u.id]),
    );
    const archivedByPrune = new Set(pruned.map((r) => r.slug));
    // Connections usable by everyone a workflow's runs act for: its owner and the caller.
    const usable = new Map<string, Set<number>>();
    const authorsOf = (row: Row | undefined) => [...new Set([row?.owner_id ?? principal.id, principal.id])].sort((a, b) => a - b);
    for (const parsed of files.values()) {
      const authors = authorsOf(rows.get(parsed.value!.slug as string));
      const key = authors.join(',');
      if (!usable.has(key))
        usable.set(
          key,
          await this.connections.usableBy(
            connections.map((c) => c.id),
            authors,
          ),
        );
    }
    const whom = (row: Row | undefined) => (row && row.owner_id !== principal.id ? "you and the workflow's owner" : 'you');
    const forFile =
      (row: Row | undefined, created: Map<string, number>): IdOf =>
      (kind, name, hint) => {
        if (kind === 'user') return users.get(name) ?? { problem: `no user with login ${name}` };
        if (kind === 'workflow') {
          if (files.has(name)) return rows.get(name)?.id ?? created.get(name) ?? { problem: `workflow ${name} is not created by these files` };
          const target = referenced.get(name);
          if (!target || !workflowVisibleTo(principal, target))
            return { problem: `no workflow with slug ${name} among the files or the workflows you may see` };
          if (target.status === 'archived') return { problem: `workflow ${name} is archived: restore it, or add its file` };
          if (archivedByPrune.has(name)) return { problem: `workflow ${name} has no file, so prune would archive it` };
          return target.id;
        }
        const fits = usable.get(authorsOf(row).join(','))!;
        const candidates = connections.filter((c) => c.label === name && fits.has(c.id));
        if (!candidates.length) return { problem: `no connection labelled "${name}" that ${whom(row)} may use` };
        if (hint.current !== undefined && candidates.some((c) => c.id === hint.current)) return hint.current;
        if (candidates.length === 1) return candidates[0]!.id;
        const owned = candidates.filter((c) => c.owner_id === (row?.owner_id ?? principal.id));
        if (owned.length === 1) return owned[0]!.id;
        return {
          problem: `${candidates.length} connections labelled "${name}" (ids ${candidates.map((c) => c.id).join(', ')}) fit; give the one to use a label of its own`,
        };
      };
    return { forFile };
  }

  /** Makes the planned changes through WorkflowService inside `tx`; answers the problems, if any (then the caller rolls back). */
  private async write(
    tx: Transaction,
    principal: Principal,
    prepared: Prepared,
    deferred: DeferredSchedules,
  ): Promise<{ problems: FileProblem[]; created: Map<string, number> }> {
    const scoped = this.workflows.within(tx, deferred);
    const problems: FileProblem[] = [];
    const writable = (c: Planned) => !c.checked || (c.checked.definition !== undefined && !c.checked.problems.length);
    const creates = prepared.changes.filter((c) => c.action === 'create' && writable(c));
    const created = new Map<string, number>();
    for (const c of creates) {
      const [next] = await tx.query<{ id: number }>(`select nextval('workflows_id_seq')::int as id`);
      created.set(c.slug, next!.id);
    }
    const attempt = async (change: Planned, step: () => Promise<unknown>) => {
      try {
        await tx.savepoint(step);
      } catch (err) {
        if (!(err instanceof AppError)) throw err;
        problems.push(...problemsOfError(err, change));
      }
    };
    // With the real ids of created workflows in place of the plan's stand-ins.
    const definitionOf = (change: Planned): CreateWorkflow | undefined => {
      const again = checkFile(change.parsed!, prepared.idOf(change, created), {
        ...(change.row ? { current: storedDefinition(change.row) } : {}),
        status: change.status,
      });
      problems.push(...again.problems);
      return again.definition;
    };
    for (const [change, definition] of orderByReferences(creates, created, definitionOf)) {
      const id = created.get(change.slug)!;
      if (definition) await attempt(change, () => scoped.create(principal, definition, { id }));
    }
    for (const change of prepared.changes.filter((c) => c.action === 'update' && writable(c))) {
      const definition = definitionOf(change);
      const row = change.row!;
      if (definition) await attempt(change, () => this.update(scoped, principal, row, change, definition));
    }
    for (const change of prepared.changes.filter((c) => c.action === 'archive')) {
      await attempt(change, () => scoped.remove(principal, change.row!.id, false));
    }
    return { problems, created };
  }

  /** PATCH with the whole definition when it changed, then the status the file asks for. */
  private async update(scoped: WorkflowService, principal: Principal, row: Row, change: Planned, definition: CreateWorkflow): Promise<void> {
    let status = row.status;
    if (status === 'archived') status = (await scoped.restore(principal, row.id)).status;
    if (change.definitionChanged) {
      const { status: _status, ...fields } = definition;
      await scoped.update(principal, row.id, fields as UpdateWorkflow);
    }
    if (change.status === 'active' && status !== 'active') await scoped.activate(principal, row.id);
    if (change.status === 'inactive' && status === 'active') await scoped.deactivate(principal, row.id);
  }
}

function line(parsed: ParsedFile, field: string): { line?: number } {
  const at = parsed.lineOf(field);
  return at === undefined ? {} : { line: at };
}

/** The problems a refused write names, as fields of its file. */
function problemsOfError(err: AppError, change: Planned): FileProblem[] {
  const file = change.parsed?.path ?? change.path;
  const errors = err.code === 'validation_failed' && Array.isArray(err.data?.errors) ? (err.data.errors as { field: string; message: string }[]) : undefined;
  const at = (field: string) => (change.parsed ? line(change.parsed, field) : {});
  if (errors) return errors.map((e) => ({ file, field: fileFieldOf(e.field), message: e.message, ...at(fileFieldOf(e.field)) }));
  const field = typeof err.data?.field === 'string' ? fileFieldOf(err.data.field) : '';
  return [{ file, field, message: `${err.message} (${err.code})`, ...at(field) }];
}

/**
 * Created workflows in an order where one that another names comes first (so a check that the
 * named workflow exists finds it), each with its definition; a cycle among them keeps the files' order.
 */
function orderByReferences(
  creates: Planned[],
  created: Map<string, number>,
  definitionOf: (change: Planned) => CreateWorkflow | undefined,
): [Planned, CreateWorkflow | undefined][] {
  const bySlug = new Map(creates.map((c) => [c.slug, [c, definitionOf(c)] as [Planned, CreateWorkflow | undefined]]));
  const slugById = new Map([...created].map(([slug, id]) => [id, slug]));
  const out: [Planned, CreateWorkflow | undefined][] = [];
  const seen = new Set<string>();
  const visit = (slug: string) => {
    if (seen.has(slug)) return;
    seen.add(slug);
    const [change, definition] = bySlug.get(slug)!;
    const named = definition ? mentionedIds(definition as unknown as Json).workflow : new Set<number>();
    for (const id of named) {
      const other = slugById.get(id);
      if (other) visit(other);
    }
    out.push([change, definition]);
  };
  for (const slug of bySlug.keys()) visit(slug);
  return out;
}
