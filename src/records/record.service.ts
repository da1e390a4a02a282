import { notFound, validationFailed } from '../platform/errors.js';
import type { Queryable, Sql } from '../db/sql.js';
import type { EntityDefinition } from './entity-definition.js';
import { assertCan, type Actor, type EntityService, type StoredEntity } from './entity.service.js';
import { compileEql, hoppedRelations, unusedParams } from './eql.compiler.js';
import { parseEql } from './eql.parser.js';
import { ident, qualifiedTable } from './naming.js';
import { translating } from './pg-errors.js';
import type { RecordData, RecordEvent, RecordEventBus } from './record-events.js';
import { allColumns, encodeValues, orderBy, parseFields, parseInclude, selectList } from './record-query.js';
import type { RecordValidator } from './record-validation.js';
import { runBulk, type BulkOperation, type BulkResult } from './record-bulk.js';

export interface ListOptions {
  eql?: string;
  /** Values of the `:name` parameters of `eql`, bound as values (never spliced into its text). */
  params?: Record<string, unknown>;
  sort?: string;
  fields?: string;
  include?: string;
  page?: number;
  perPage?: number;
}

export interface RecordPage {
  items: RecordData[];
  total: number;
  page: number;
  per_page: number;
}

export const DEFAULT_PER_PAGE = 20;
export const MAX_PER_PAGE = 200;

/**
 * Records of user-defined entities: queries with EQL, writes validated against the entity's
 * JSON Schema, events after commit. Callers pass who is acting; capabilities come from the
 * entity's definition.
 */
export class RecordService {
  constructor(
    private readonly db: Sql,
    private readonly entities: EntityService,
    private readonly validator: RecordValidator,
    private readonly events: RecordEventBus,
  ) {}

  /** Related entities an actor reads through (hops, includes) need their own view capability. */
  private async related(actor: Actor, slugs: Iterable<string>): Promise<Map<string, EntityDefinition>> {
    const out = new Map<string, EntityDefinition>();
    for (const slug of new Set(slugs)) out.set(slug, (await this.entities.requireFor(actor, slug, 'view')).definition);
    return out;
  }

  /** Replaces each included relation's uuid by the related record: one query per relation, never per row. */
  private async include(rows: RecordData[], includes: { field: string; target: string }[], targets: Map<string, EntityDefinition>): Promise<void> {
    await Promise.all(
      includes.map(async ({ field, target }) => {
        const ids = [...new Set(rows.map((r) => r[field]).filter((v): v is string => typeof v === 'string'))];
        if (!ids.length) return;
        const def = targets.get(target)!;
        const related = await translating(def, () =>
          this.db.query<RecordData>(`select ${selectList(allColumns(def), 'r')} from ${qualifiedTable(target)} r where r."uuid" = any($1::uuid[])`, [ids]),
        );
        const byId = new Map(related.map((r) => [r.uuid, r]));
        for (const row of rows) if (typeof row[field] === 'string') row[field] = byId.get(row[field] as string) ?? null;
      }),
    );
  }

  async list(actor: Actor, slug: string, options: ListOptions = {}): Promise<RecordPage> {
    const { definition: def } = await this.entities.requireFor(actor, slug, 'view');
    const page = options.page ?? 1;
    const perPage = options.perPage ?? DEFAULT_PER_PAGE;
    const includes = parseInclude(def, options.include);
    const columns = parseFields(
      def,
      options.fields,
      includes.map((i) => i.field),
    );
    const order = orderBy(def, options.sort, 't');
    const ast = options.eql !== undefined && options.eql.trim() !== '' ? parseEql(options.eql) : undefined;
    const unused = unusedParams(ast, options.params);
    if (unused.length) throw validationFailed(unused);
    const targets = await this.related(actor, [...(ast ? hoppedRelations(ast, def) : []), ...includes.map((i) => i.target)]);
    const filter = ast
      ? compileEql(options.eql!, ast, { entity: def, alias: 't', related: (s) => targets.get(s), ...(options.params ? { params: options.params } : {}) })
      : { sql: 'true', params: [] };
    const from = `from ${qualifiedTable(slug)} t where ${filter.sql}`;
    const n = filter.params.length;
    const [items, [count]] = await translating(def, () =>
      Promise.all([
        this.db.query<RecordData>(`select ${selectList(columns, 't')} ${from} order by ${order} limit $${n + 1} offset $${n + 2}`, [
          ...filter.params,
          perPage,
          (page - 1) * perPage,
        ]),
        this.db.query<{ n: number }>(`select count(*)::int as n ${from}`, filter.params),
      ]),
    );
    await this.include(items, includes, targets);
    return { items, total: count!.n, page, per_page: perPage };
  }

  private async fetch(sql: Queryable, def: EntityDefinition, uuid: string, columns = allColumns(def), lock = false): Promise<RecordData> {
    const [row] = await sql.query<RecordData>(
      `select ${selectList(columns, 't')} from ${qualifiedTable(def.slug)} t where t."uuid" = $1${lock ? ' for update' : ''}`,
      [uuid],
    );
    if (!row) throw notFound(`${def.slug} record ${uuid}`);
    return row;
  }

  async get(actor: Actor, slug: string, uuid: string, options: Pick<ListOptions, 'fields' | 'include'> = {}): Promise<RecordData> {
    const { definition: def } = await this.entities.requireFor(actor, slug, 'view');
    const includes = parseInclude(def, options.include);
    const columns = parseFields(
      def,
      options.fields,
      includes.map((i) => i.field),
    );
    const targets = await this.related(
      actor,
      includes.map((i) => i.target),
    );
    const row = await translating(def, () => this.fetch(this.db, def, uuid, columns));
    await this.include([row], includes, targets);
    return row;
  }

  /** The insert, update and delete statements, shared by single writes and bulk operations. */
  async insert(sql: Queryable, entity: StoredEntity, body: Record<string, unknown>): Promise<RecordEvent> {
    const def = entity.definition;
    this.validator.check(entity, body, false);
    const { columns, values } = encodeValues(def, body);
    const text = columns.length
      ? `insert into ${qualifiedTable(def.slug)} as t (${columns.map(ident).join(', ')}) values (${values.map((_, i) => `$${i + 1}`).join(', ')})`
      : `insert into ${qualifiedTable(def.slug)} as t default values`;
    const [record] = await translating(def, () => sql.query<RecordData>(`${text} returning ${selectList(allColumns(def), 't')}`, values));
    return { entity: def.slug, action: 'created', record: record! };
  }

  async change(sql: Queryable, entity: StoredEntity, uuid: string, body: Record<string, unknown>): Promise<RecordEvent> {
    const def = entity.definition;
    this.validator.check(entity, body, true);
    return translating(def, async () => {
      const previous = await this.fetch(sql, def, uuid, allColumns(def), true);
      const { columns, values } = encodeValues(def, body);
      if (!columns.length) return { entity: def.slug, action: 'updated', record: previous, previous };
      // clock_timestamp, not now(): a record created and updated in one bulk transaction still shows the update.
      const sets = [...columns.map((c, i) => `${ident(c)} = $${i + 2}`), '"updated_at" = clock_timestamp()'].join(', ');
      const [record] = await sql.query<RecordData>(
        `update ${qualifiedTable(def.slug)} as t set ${sets} where t."uuid" = $1 returning ${selectList(allColumns(def), 't')}`,
        [uuid, ...values],
      );
      return { entity: def.slug, action: 'updated', record: record!, previous };
    });
  }

  async delete(sql: Queryable, entity: StoredEntity, uuid: string): Promise<RecordEvent> {
    const def = entity.definition;
    const [record] = await translating(def, () =>
      sql.query<RecordData>(`delete from ${qualifiedTable(def.slug)} as t where t."uuid" = $1 returning ${selectList(allColumns(def), 't')}`, [uuid]),
    );
    if (!record) throw notFound(`${def.slug} record ${uuid}`);
    return { entity: def.slug, action: 'deleted', record };
  }

  /**
   * What create (or, `partial`, update) would refuse before writing: the actor's capability and
   * the body against the entity's schema. Writes nothing; unique values are only known at write.
   */
  async checkWrite(actor: Actor, slug: string, body: Record<string, unknown>, partial: boolean): Promise<void> {
    const entity = await this.entities.requireFor(actor, slug, partial ? 'edit' : 'create');
    this.validator.check(entity, body, partial);
  }

  /**
   * What a write answers: the record to an actor who may view the entity's records, otherwise only
   * its uuid (the right to create, edit or delete records is not the right to read them).
   */
  private answer(actor: Actor, entity: StoredEntity, record: RecordData): RecordData {
    return actor.can(entity.definition.capabilities.view) ? record : { uuid: record.uuid };
  }

  async create(actor: Actor, slug: string, body: Record<string, unknown>): Promise<RecordData> {
    const entity = await this.entities.requireFor(actor, slug, 'create');
    const event = await this.insert(this.db, entity, body);
    this.events.publish([event]);
    return this.answer(actor, entity, event.record);
  }

  async update(actor: Actor, slug: string, uuid: string, body: Record<string, unknown>): Promise<RecordData> {
    const entity = await this.entities.requireFor(actor, slug, 'edit');
    const event = await this.db.transaction((tx) => this.change(tx, entity, uuid, body));
    if (event.record !== event.previous) this.events.publish([event]);
    return this.answer(actor, entity, event.record);
  }

  async remove(actor: Actor, slug: string, uuid: string): Promise<RecordData> {
    const entity = await this.entities.requireFor(actor, slug, 'delete');
    const event = await this.delete(this.db, entity, uuid);
    this.events.publish([event]);
    return this.answer(actor, entity, event.record);
  }

  /** Up to 100 operations in one transaction, each in its own savepoint; events after the commit. */
  async bulk(actor: Actor, slug: string, operations: BulkOperation[]): Promise<BulkResult> {
    const entity = await this.entities.require(slug);
    const actions = { create: 'create', update: 'edit', delete: 'delete' } as const;
    for (const op of new Set(operations.map((o) => o.op))) assertCan(actor, entity.definition, actions[op]);
    const { result, events } = await this.db.transaction((tx) => runBulk(tx, this, entity, operations));
    this.events.publish(events);
    return result;
  }
}
