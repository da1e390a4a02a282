import { pgErrorOf } from '../db/database-errors.js';
import type { ExecutionMirror } from '../executions/execution.mirror.js';
import type { Sql, Transaction } from '../db/sql.js';
import type { Graph, GraphNode } from '../../workflows/defs.js';
import type { Principal } from '../auth/auth.service.js';
import { nodeTypes } from '../nodes/index.js';
import { randomToken } from '../platform/crypto.js';
import { deepFreeze, type NotifiedCache } from '../platform/notified-cache.js';
import { AppError, conflict, notFound, validationFailed, type FieldProblem } from '../platform/errors.js';
import { everyNode, shapeBodies, validateGraph } from './graph-validator.js';
import type { ActingUsers } from '../auth/acting.js';
import type { ConnectionService } from '../connections/connection.service.js';
import type { EntityService } from '../records/entity.service.js';
import type { WorkflowSchedules } from './workflow.schedules.js';
import type { CreateWorkflow, Trigger, UpdateWorkflow, WorkflowRow, WorkflowStatus } from './workflow.schemas.js';

export type { WorkflowRow, WorkflowStatus } from './workflow.schemas.js';

/** The channel every change to the workflows table is announced on (by a trigger, at commit; empty payload). */
export const WORKFLOWS_CHANNEL = 'svc_workflows';

/** How many workflows each API process keeps for webhook calls; the one called least recently goes first. */
export const HOOKS_KEPT = 1000;

export interface ListQuery {
  status?: WorkflowStatus;
  tag?: string;
  q?: string;
  page: number;
  per_page: number;
}

const slugify = (title: string) =>
  title
    .toLowerCase()
    .normalize('NFKD')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 90) || 'workflow';

const columns = `w.id, w.slug, w.title, w.description, w.tags, w.status, w.trigger_type, w.trigger, w.nodes, w.edges,
  w.node_count, w.connection_ids, w.version, w.webhook_secret, w.owner_id, u.login as owner_login, w.updated_by, w.shared_with,
  w.error_workflow_id, w.created_at, w.updated_at`;

/** What a workflow definition checks beyond its own shape: the connections it names, the entity a record trigger reads. */
export interface DefinitionPorts {
  connections: Pick<ConnectionService, 'usableBy'>;
  entities: Pick<EntityService, 'find'>;
  acting: Pick<ActingUsers, 'principal'>;
}

/**
 * The visibility rule of workflows and everything under them (executions, replays): a user sees
 * the workflows they own and those shared with them; administrators see all.
 */
export function workflowVisibility(principal: Principal, alias = 'w'): [string, unknown[]] {
  if (principal.role === 'administrator') return ['true', []];
  return [`(${alias}.owner_id = ? or ? = any(${alias}.shared_with))`, [principal.id, principal.id]];
}

/** The same rule as workflowVisibility, over a workflow row already read. */
export function workflowVisibleTo(principal: Principal, row: Pick<WorkflowRow, 'owner_id'> & { shared_with?: number[] | null }): boolean {
  return principal.role === 'administrator' || row.owner_id === principal.id || (row.shared_with ?? []).includes(principal.id);
}

/**
 * Whether a workflow exists at all is its owner's choice, as whom it is shared with is: someone it
 * is shared with may edit and run it, not archive, restore or purge it (administrators may).
 */
function assertOwnerOrAdministrator(principal: Principal, row: Pick<WorkflowRow, 'owner_id'>, what: string): void {
  if (principal.id !== row.owner_id && principal.role !== 'administrator')
    throw new AppError('forbidden', `Only the workflow's owner (or an administrator) ${what} it`);
}

/** Workflow definitions: validation, versions, visibility and the status lifecycle. */
export class WorkflowService {
  constructor(
    private readonly sql: Sql,
    private readonly schedules: WorkflowSchedules,
    private readonly executions: Pick<ExecutionMirror, 'runningOfWorkflow'>,
    private readonly definitions: DefinitionPorts,
    /** The workflows webhook calls name, kept in this process's memory (see hookBySlug). */
    private readonly hooks?: NotifiedCache<WorkflowRow>,
  ) {}

  // ---- Workflow files (apply): the same service inside one transaction ---------------------------
  /**
   * This service with its reads and writes inside `tx` and its schedule changes handed to
   * `schedules` (which applies them after commit): every rule of create, PATCH and the status
   * transitions holds, for many workflows written all or nothing. Derived from `this`, so any
   * dependency the service gains carries over.
   */
  within(tx: Transaction, schedules: Pick<WorkflowSchedules, 'sync' | 'pause' | 'remove'>): WorkflowService {
    const scoped = Object.create(this) as WorkflowService;
    const sql: Pick<Sql, 'query' | 'transaction'> = {
      query: tx.query,
      // A transaction inside it is a savepoint of it: its failure undoes only its own work.
      transaction: <T>(fn: (inner: Transaction) => Promise<T>) => tx.savepoint(() => fn(tx)),
    };
    Object.assign(scoped as object, { sql, schedules });
    return scoped;
  }
  // ---- end of workflow files -------------------------------------------------------------------

  /** SQL condition on the workflows table (as `alias`) and its values: what the caller may see. */
  visibility(principal: Principal, alias = 'w'): [string, unknown[]] {
    return workflowVisibility(principal, alias);
  }

  async list(principal: Principal, query: ListQuery) {
    const [visible, params] = this.visibility(principal);
    const where = [visible];
    const args = [...params];
    if (query.status) {
      where.push('w.status = ?');
      args.push(query.status);
    }
    if (query.tag) {
      where.push('? = any(w.tags)');
      args.push(query.tag);
    }
    if (query.q) {
      where.push(`w.search @@ websearch_to_tsquery('english', ?)`);
      args.push(query.q);
    }
    const clause = where.join(' and ');
    const [{ total }] = (await this.sql.query<{ total: string }>(`select count(*) as total from workflows w where ${clause}`, args)) as [{ total: string }];
    const order = query.q ? `ts_rank(w.search, websearch_to_tsquery('english', ?)) desc, w.id desc` : 'w.id desc';
    const rows = await this.sql.query<WorkflowRow>(
      `select ${columns} from workflows w join users u on u.id = w.owner_id where ${clause} order by ${order} limit ? offset ?`,
      [...args, ...(query.q ? [query.q] : []), query.per_page, (query.page - 1) * query.per_page],
    );
    return {
      items: rows.map((r) => ({
        id: r.id,
        slug: r.slug,
        title: r.title,
        status: r.status,
        trigger_type: r.trigger_type,
        node_count: r.node_count,
        description: r.description,
        tags: r.tags,
      })),
      total: Number(total),
      page: query.page,
      per_page: query.per_page,
    };
  }

  /** A workflow the caller can see, else 404 (another user's workflow does not exist for them). */
  async get(principal: Principal | 'system', id: number): Promise<WorkflowRow> {
    const [visible, params] = principal === 'system' ? ['true', []] : this.visibility(principal);
    const rows = await this.sql.query<WorkflowRow>(
      `select ${columns} from workflows w join users u on u.id = w.owner_id where w.id = ? and ${visible}`,
      [id, ...params],
      { prepared: true },
    );
    if (!rows[0]) throw notFound('Workflow');
    return rows[0];
  }

  /** Active workflows with a `record` trigger on this entity and action. */
  async listeningTo(entity: string, action: string): Promise<number[]> {
    const rows = await this.sql.query<{ id: number }>(
      `select id from workflows where status = 'active' and trigger_type = 'record'
         and trigger->'config'->>'entity' = ? and trigger->'config'->'events' @> jsonb_build_array(?::text)`,
      [entity, action],
    );
    return rows.map((r) => r.id);
  }

  async getBySlug(slug: string): Promise<WorkflowRow | undefined> {
    const rows = await this.sql.query<WorkflowRow>(`select ${columns} from workflows w join users u on u.id = w.owner_id where w.slug = ?`, [slug], {
      prepared: true,
    });
    return rows[0];
  }

  /**
   * The workflow a webhook call names (as getBySlug), from this process's memory when it was read
   * before: a webhook's round trip then makes one statement fewer before its run starts. Kept only
   * while the process hears every change to the workflows table (announced at commit by a
   * trigger, whoever makes the change); a change this process makes drops it at once (`changed`).
   * A slug that names no workflow is read every time. The row is frozen: requests share it.
   */
  async hookBySlug(slug: string): Promise<WorkflowRow | undefined> {
    if (!this.hooks) return this.getBySlug(slug);
    return this.hooks.get(slug, async () => deepFreeze(await this.getBySlug(slug)));
  }

  /** Stops listening for changes (the workflows kept for webhook calls go with it). */
  async close(): Promise<void> {
    await this.hooks?.stop();
  }

  /** Drops the workflows kept for webhook calls: after every change this process makes to workflows, once committed. */
  changed(): void {
    this.hooks?.invalidate();
  }

  /**
   * Validates the graph and what it names; throws 400 listing every problem. `authors` are the
   * people a run of it will act for (the owner and whoever saves it): each connection it names
   * must be usable by all of them, and a record trigger's entity readable by all of them (403).
   */
  private async validate(
    graph: Graph,
    trigger: Trigger,
    sharedWith: number[],
    authors: number[],
    /** An error workflow chosen now: checked for the same people (the owner, whose failures it receives, and whoever saves). */
    errorWorkflowId?: number | null,
  ): Promise<number[]> {
    const problems: FieldProblem[] = validateGraph(graph, trigger, nodeTypes);
    if (errorWorkflowId != null) problems.push(...(await this.checkErrorWorkflow(errorWorkflowId, authors)));
    // A node's connection_id, and the connections and logins its configuration names (an approval's
    // notify and approvers), for_each bodies' nodes included.
    const named = [...everyNode(graph.nodes)].flatMap(([n, at]) => {
      const refs = problems.some((p) => p.field.startsWith(`${at}.`)) ? undefined : nodeTypes.get(n.type)?.references?.(n.config);
      return [
        ...(typeof n.connection_id === 'number' ? [{ id: n.connection_id, field: `${at}.connection_id` }] : []),
        ...(refs?.connections ?? []).map((c) => ({ id: c.id, field: `${at}.config.${c.field}` })),
      ];
    });
    const connectionIds = [...new Set(named.map((c) => c.id))];
    if (connectionIds.length) {
      const usable = await this.definitions.connections.usableBy(connectionIds, authors);
      for (const { id, field } of named) {
        if (!usable.has(id)) {
          problems.push({
            field,
            message: `connection ${id} does not exist or is not shared with ${authors.length > 1 ? "you and the workflow's owner" : 'you'}`,
          });
        }
      }
    }
    await this.checkLogins(graph, problems);
    if (trigger.type === 'record' && !problems.length) await this.assertRecordTrigger(trigger.config.entity, authors, problems);
    if (sharedWith.length) {
      const users = await this.sql.query<{ id: number }>('select id from users where id = any(?)', [sharedWith]);
      const known = new Set(users.map((u) => u.id));
      sharedWith.forEach((id, i) => {
        if (!known.has(id)) problems.push({ field: `shared_with.${i}`, message: `user ${id} does not exist` });
      });
    }
    if (problems.length) throw validationFailed(problems);
    graph.nodes = shapeBodies(graph.nodes);
    return connectionIds;
  }

  /** An error workflow must exist, not be archived, and be visible to `people` (the owner, whose failures it receives, and whoever saves). */
  private async checkErrorWorkflow(id: number, people: number[]): Promise<FieldProblem[]> {
    const [row] = await this.sql.query<{ status: WorkflowStatus }>('select status from workflows where id = ?', [id]);
    if (!row || !(await this.visibleToAll(id, people))) {
      const whom = people.length > 1 ? "you and the workflow's owner" : "the workflow's owner";
      return [{ field: 'error_workflow_id', message: `workflow ${id} does not exist or is not visible to ${whom}` }];
    }
    if (row.status === 'archived') return [{ field: 'error_workflow_id', message: `workflow ${id} is archived; restore it or choose another` }];
    return [];
  }

  /** Every login a node's configuration names (an approval's approvers) must exist. */
  private async checkLogins(graph: Graph, problems: FieldProblem[]): Promise<void> {
    const named = [...everyNode(graph.nodes)].flatMap(([n, at]) =>
      problems.some((p) => p.field.startsWith(`${at}.`))
        ? []
        : (nodeTypes.get(n.type)?.references?.(n.config).logins ?? []).map((l) => ({ ...l, field: `${at}.config.${l.field}` })),
    );
    if (!named.length) return;
    const rows = await this.sql.query<{ login: string }>('select login from users where login = any(?)', [[...new Set(named.map((l) => l.login))]]);
    const known = new Set(rows.map((r) => r.login));
    for (const { login, field } of named) if (!known.has(login)) problems.push({ field, message: `user ${login} does not exist` });
  }

  /**
   * A record trigger delivers the entity's records: the people its runs act for must all hold the
   * entity's view capability (403 naming it). An entity that does not exist is a problem of the
   * definition.
   */
  private async assertRecordTrigger(entity: string, people: number[], problems: FieldProblem[] = []): Promise<void> {
    const stored = await this.definitions.entities.find(entity);
    if (!stored) {
      problems.push({ field: 'trigger.config.entity', message: `entity ${entity} does not exist` });
      return;
    }
    const principal = await this.definitions.acting.principal(people, people[0]!);
    const capability = stored.definition.capabilities.view;
    if (!principal?.can(capability)) {
      throw new AppError(
        'forbidden',
        `A record trigger on ${entity} needs ${capability}, which ${principal ? 'a person this workflow acts for lacks' : 'nobody left holds'}`,
        {
          capability,
        },
      );
    }
  }

  /** The people a run of this workflow acts for, without whoever starts it: its owner and who wrote it last. */
  authorsOf(row: Pick<WorkflowRow, 'owner_id' | 'updated_by'>): number[] {
    return [...new Set([row.owner_id, row.updated_by ?? row.owner_id])];
  }

  /** `options.id`: an id taken beforehand from the workflows' sequence (files applied together name each other). */
  async create(principal: Principal, body: CreateWorkflow, options: { id?: number } = {}): Promise<WorkflowRow> {
    const graph = { nodes: body.nodes as GraphNode[], edges: body.edges };
    const connectionIds = await this.validate(graph, body.trigger, body.shared_with, [principal.id], body.error_workflow_id);
    const secret = body.trigger.type === 'webhook' ? randomToken(24) : null;
    const insert = (slug: string) =>
      this.sql.transaction(async (tx) => {
        const existing = await tx.query<{ id: number }>('select id from workflows where slug = ?', [slug]);
        if (existing.length) throw conflict('conflict', `A workflow with slug ${slug} exists`, { field: 'slug' });
        const [row] = await tx.query<{ id: number }>(
          `insert into workflows (id, slug, title, description, tags, status, trigger_type, trigger, nodes, edges, node_count, connection_ids, webhook_secret, owner_id, shared_with, updated_by, error_workflow_id, error_workflow_chosen_by)
           values (coalesce(?::int, nextval('workflows_id_seq')), ?, ?, ?, ?, 'inactive', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) returning id`,
          [
            options.id ?? null,
            slug,
            body.title,
            body.description,
            body.tags,
            body.trigger.type,
            JSON.stringify(body.trigger),
            JSON.stringify(graph.nodes),
            JSON.stringify(graph.edges),
            graph.nodes.length,
            connectionIds,
            secret,
            principal.id,
            body.shared_with,
            principal.id,
            body.error_workflow_id,
            body.error_workflow_id === null ? null : principal.id,
          ],
        );
        await tx.query('insert into workflow_versions (workflow_id, version, definition, created_by) values (?, 1, ?, ?)', [
          row!.id,
          JSON.stringify({ trigger: body.trigger, ...graph }),
          principal.id,
        ]);
        return row!.id;
      });
    let id: number;
    if (body.slug !== undefined) {
      id = await insert(body.slug).finally(() => this.changed());
    } else {
      // A slug derived from the title: a simultaneous create may take it first; then take the next.
      for (let attempt = 1; ; attempt++) {
        try {
          id = await insert(await this.freeSlug(slugify(body.title))).finally(() => this.changed());
          break;
        } catch (err) {
          const taken = pgErrorOf(err)?.code === '23505' || (err instanceof AppError && err.code === 'conflict');
          if (attempt >= 25 || !taken) throw err;
        }
      }
    }
    if (body.status === 'active') return this.activateCreated(principal, id);
    return this.get(principal, id);
  }

  /** A workflow created active: saved with its schedule (or trigger) or not at all. */
  private async activateCreated(principal: Principal, id: number): Promise<WorkflowRow> {
    try {
      return await this.activate(principal, id);
    } catch (err) {
      // Nothing else knows the workflow yet: the request that failed leaves nothing behind.
      if (err instanceof AppError && err.status < 500) await this.sql.query('delete from workflows where id = ?', [id]).finally(() => this.changed());
      throw err;
    }
  }

  private async freeSlug(base: string): Promise<string> {
    const taken = new Set(
      (await this.sql.query<{ slug: string }>(`select slug from workflows where slug = ? or slug like ?`, [base, `${base}-%`])).map((r) => r.slug),
    );
    if (!taken.has(base)) return base;
    for (let i = 2; ; i++) if (!taken.has(`${base}-${i}`)) return `${base}-${i}`;
  }

  /** Partial update; the whole definition is validated again and the version goes up by one. */
  async update(principal: Principal, id: number, body: UpdateWorkflow): Promise<WorkflowRow> {
    const current = await this.get(principal, id);
    if (current.status === 'archived') throw conflict('workflow_archived', 'Restore the workflow before editing it');
    const trigger = body.trigger ?? current.trigger;
    const graph: Graph = { nodes: (body.nodes as GraphNode[] | undefined) ?? current.nodes, edges: body.edges ?? current.edges };
    const sharedWith = body.shared_with ?? current.shared_with;
    const sameSet = (a: number[], b: number[]) => a.length === b.length && new Set([...a, ...b]).size === new Set(a).size;
    // Whom a workflow is shared with is its owner's choice (administrators manage every workflow).
    if (!sameSet(sharedWith, current.shared_with) && principal.id !== current.owner_id && principal.role !== 'administrator') {
      throw new AppError('forbidden', "Only the workflow's owner changes whom it is shared with");
    }
    // The new version is the saver's: its runs act for them and the owner together.
    const errorWorkflowId = body.error_workflow_id === undefined ? current.error_workflow_id : body.error_workflow_id;
    // Checked again only when it changes: one that was fine when chosen is checked when it runs.
    const chosen = body.error_workflow_id !== undefined && body.error_workflow_id !== current.error_workflow_id ? errorWorkflowId : undefined;
    const connectionIds = await this.validate(graph, trigger, sharedWith, [...new Set([current.owner_id, principal.id])], chosen);
    if (body.slug && body.slug !== current.slug && (await this.getBySlug(body.slug))) {
      throw conflict('conflict', `A workflow with slug ${body.slug} exists`, { field: 'slug' });
    }
    const secret = trigger.type === 'webhook' ? (current.webhook_secret ?? randomToken(24)) : null;
    let scheduled = false;
    const saved = this.sql.transaction(async (tx) => {
      const [row] = await tx.query<{ version: number }>(
        `update workflows set slug = ?, title = ?, description = ?, tags = ?, trigger_type = ?, trigger = ?, nodes = ?, edges = ?,
           node_count = ?, connection_ids = ?, webhook_secret = ?, shared_with = ?, error_workflow_id = ?,
           error_workflow_chosen_by = case when ?::boolean then ?::int else error_workflow_chosen_by end, version = version + 1, updated_by = ?, updated_at = now()
         where id = ? returning version`,
        [
          body.slug ?? current.slug,
          body.title ?? current.title,
          body.description ?? current.description,
          body.tags ?? current.tags,
          trigger.type,
          JSON.stringify(trigger),
          JSON.stringify(graph.nodes),
          JSON.stringify(graph.edges),
          graph.nodes.length,
          connectionIds,
          secret,
          sharedWith,
          errorWorkflowId,
          // Who chose the error workflow: its failures' messages reach it on their rights (ExecutionMirror.queueErrorRun).
          errorWorkflowId !== current.error_workflow_id,
          errorWorkflowId === null ? null : principal.id,
          principal.id,
          id,
        ],
      );
      await tx.query('insert into workflow_versions (workflow_id, version, definition, created_by) values (?, ?, ?, ?)', [
        id,
        row!.version,
        JSON.stringify({ trigger, ...graph }),
        principal.id,
      ]);
      // An active workflow's new version is saved with its schedule or not at all: a schedule
      // Temporal refuses rolls the version back, and the old schedule runs on as it was.
      if (current.status === 'active') scheduled = await this.schedules.sync({ ...current, trigger }).then(() => true);
    });
    await saved
      .catch(async (err: unknown) => {
        // The commit failed after Temporal took the new schedule: the old one is put back.
        if (scheduled) await this.schedules.sync(current).catch(() => undefined);
        throw err;
      })
      .finally(() => this.changed());
    return this.get(principal, id);
  }

  private async setStatus(id: number, status: WorkflowStatus) {
    await this.sql.query('update workflows set status = ?, updated_at = now() where id = ?', [status, id]).finally(() => this.changed());
  }

  /** Idempotent: an active workflow stays active; its schedule is (re)created. */
  async activate(principal: Principal, id: number): Promise<WorkflowRow> {
    const row = await this.get(principal, id);
    // Its runs would read the entity for the people they act for: they must still be allowed to.
    if (row.trigger.type === 'record') {
      const problems: FieldProblem[] = [];
      await this.assertRecordTrigger(row.trigger.config.entity, this.authorsOf(row), problems);
      if (problems.length) throw validationFailed(problems);
    }
    await this.schedules.sync(row);
    if (row.status !== 'active') await this.setStatus(id, 'active');
    return this.get(principal, id);
  }

  async deactivate(principal: Principal, id: number): Promise<WorkflowRow> {
    const row = await this.get(principal, id);
    if (row.status === 'archived') throw conflict('workflow_archived', 'The workflow is archived; restore it instead');
    await this.schedules.pause(row);
    if (row.status !== 'inactive') await this.setStatus(id, 'inactive');
    return this.get(principal, id);
  }

  /** Archived back to inactive; a workflow that is not archived is left as it is. */
  async restore(principal: Principal, id: number): Promise<WorkflowRow> {
    const row = await this.get(principal, id);
    assertOwnerOrAdministrator(principal, row, 'restores');
    if (row.status === 'archived') await this.setStatus(id, 'inactive');
    return this.get(principal, id);
  }

  /** DELETE: archives (soft delete); with force on an archived workflow, purges it for good. */
  async remove(principal: Principal, id: number, force: boolean): Promise<{ id: number; status: 'archived' | 'purged' }> {
    const row = await this.get(principal, id);
    assertOwnerOrAdministrator(principal, row, force ? 'purges' : 'archives');
    if (!force) {
      await this.schedules.pause(row);
      await this.setStatus(id, 'archived');
      return { id, status: 'archived' };
    }
    if (row.status !== 'archived') throw conflict('not_archived', 'Archive the workflow (DELETE without force) before purging it');
    const running = await this.executions.runningOfWorkflow(id);
    if (running.length) {
      throw conflict('executions_running', 'The workflow has runs in progress; cancel them or wait before purging', { executions: running });
    }
    await this.schedules.remove(row);
    await this.sql.query('delete from workflows where id = ?', [id]).finally(() => this.changed());
    return { id, status: 'purged' };
  }

  /** Whether every one of `userIds` may see the workflow (owner, shared with, or administrator); false when it does not exist. */
  async visibleToAll(id: number, userIds: number[]): Promise<boolean> {
    const people = [...new Set(userIds)];
    const [row] = await this.sql.query<{ visible: boolean }>(
      `select count(*) = cardinality(?::int[]) and coalesce(bool_and(u.role = 'administrator' or u.id = w.owner_id or u.id = any(w.shared_with)), false) as visible
         from workflows w join users u on u.id = any(?::int[]) where w.id = ?`,
      [people, people, id],
    );
    return row?.visible === true;
  }

  /** The definition of one version, for the engine. */
  async loadVersion(id: number, version?: number): Promise<{ version: number; graph: Graph; status: WorkflowStatus; ownerId: number }> {
    const rows = await this.sql.query<{ version: number; definition: Graph & { trigger: Trigger }; status: WorkflowStatus; owner_id: number }>(
      `select v.version, v.definition, w.status, w.owner_id from workflows w join workflow_versions v on v.workflow_id = w.id
        where w.id = ? and v.version = coalesce(?, w.version)`,
      [id, version ?? null],
    );
    const row = rows[0];
    if (!row) throw new AppError('not_found', `Workflow ${id}${version ? ` version ${version}` : ''} not found`);
    return { version: row.version, graph: { nodes: row.definition.nodes, edges: row.definition.edges }, status: row.status, ownerId: row.owner_id };
  }
}
