import { conflict, forbidden, notFound, problemsOf, validationFailed } from '../platform/errors.js';
import type { Queryable, Sql, Transaction } from '../db/sql.js';
import {
  applyPatch,
  definitionProblems,
  definitionSchema,
  fieldNamed,
  normalise,
  type DefinitionInput,
  type DefinitionPatch,
  type EntityDefinition,
  type RecordAction,
} from './entity-definition.js';
import type { NotifiedCache } from '../platform/notified-cache.js';
import { qualifiedTable } from './naming.js';
import { translating } from './pg-errors.js';
import { planCreate, reconcile, type Change, type Plan } from './reconciler.js';

/** Anyone whose capabilities can be checked: a signed-in user, or a workflow acting for one. */
export interface Actor {
  can(capability: string): boolean;
}

export interface StoredEntity {
  definition: EntityDefinition;
  createdAt: string;
  updatedAt: string;
}

export type EntityView = EntityDefinition & { created_at: string; updated_at: string };

export interface DryRun {
  changes: Pick<Change, 'kind' | 'field' | 'sql' | 'destructive'>[];
  destructive: boolean;
}

interface CatalogueRow {
  definition: EntityDefinition;
  field_order: string[];
  created_at: string;
  updated_at: string;
}

/** The channel entity changes are announced on (the slug as payload), for every process's definition cache. */
export const ENTITY_CHANNEL = 'svc_entities';

/** Serialises entity DDL across API processes: two changes to related tables never interleave. */
const ENTITY_DDL_LOCK = 7_240_118_002;

const dryRunOf = (plan: Plan): DryRun => ({
  changes: plan.changes.map(({ kind, field, sql, destructive }) => ({ kind, field, sql, destructive })),
  destructive: plan.destructive,
});

/** Entity definitions: the `entities` catalogue plus one real table per entity. */
export class EntityService {
  constructor(
    private readonly db: Sql,
    private readonly cache?: NotifiedCache<StoredEntity>,
  ) {}

  // jsonb does not keep key order, so the field order is stored beside the definition.
  private fromRow(row: CatalogueRow): StoredEntity {
    const fields = row.definition.schema.fields;
    const ordered = Object.fromEntries(row.field_order.filter((n) => fieldNamed(fields, n)).map((n) => [n, fields[n]!]));
    return { definition: { ...row.definition, schema: { fields: ordered } }, createdAt: row.created_at, updatedAt: row.updated_at };
  }

  /** The entity; from the process cache unless `sql` (a transaction) is given. */
  async find(slug: string, sql?: Queryable): Promise<StoredEntity | undefined> {
    const load = async () => {
      const [row] = await (sql ?? this.db).query<CatalogueRow>('select definition, field_order, created_at, updated_at from entities where slug = $1', [slug]);
      return row ? this.fromRow(row) : undefined;
    };
    return sql || !this.cache ? load() : this.cache.get(slug, load);
  }

  async require(slug: string, sql?: Queryable): Promise<StoredEntity> {
    const found = await this.find(slug, sql);
    if (!found) throw notFound(`Entity ${slug}`);
    return found;
  }

  /** The entity, when `actor` holds the capability the entity names for `action`. */
  async requireFor(actor: Actor, slug: string, action: RecordAction): Promise<StoredEntity> {
    const found = await this.require(slug);
    assertCan(actor, found.definition, action);
    return found;
  }

  /** Stops the cache's listening connection. */
  async close(): Promise<void> {
    await this.cache?.stop();
  }

  view(stored: StoredEntity): EntityView {
    return { ...stored.definition, created_at: stored.createdAt, updated_at: stored.updatedAt };
  }

  /** Entities whose records `actor` may view, with their record counts. */
  async list(actor: Actor, page: number, perPage: number) {
    const rows = await this.db.query<{ slug: string; name: string; view: string | null }>(
      `select slug, name, definition->'capabilities'->>'view' as view from entities order by slug`,
    );
    const visible = rows.filter((r) => actor.can(r.view ?? 'svc_view_records'));
    const pageRows = visible.slice((page - 1) * perPage, page * perPage);
    const counts = new Map<string, number>();
    if (pageRows.length) {
      const union = pageRows.map((r, i) => `select $${i + 1}::text as slug, count(*)::int as n from ${qualifiedTable(r.slug)}`).join(' union all ');
      // A table dropped since the catalogue read above is a 409 entity_changed, not a 500.
      const rows = await translating(undefined, () =>
        this.db.query<{ slug: string; n: number }>(
          union,
          pageRows.map((r) => r.slug),
        ),
      );
      for (const c of rows) counts.set(c.slug, c.n);
    }
    return {
      items: pageRows.map((r) => ({ slug: r.slug, name: r.name, record_count: counts.get(r.slug) ?? 0 })),
      total: visible.length,
      page,
      per_page: perPage,
    };
  }

  /**
   * Runs an entity change under the DDL lock. `changed` collects the slugs it touches: every
   * process hears of them by NOTIFY at commit, and this one drops them from its cache at once.
   */
  private async lockedTransaction<T>(fn: (tx: Transaction, changed: Set<string>) => Promise<T>): Promise<T> {
    const changed = new Set<string>();
    try {
      return await this.db.transaction(async (tx) => {
        await tx.query('select pg_advisory_xact_lock($1)', [ENTITY_DDL_LOCK]);
        const result = await fn(tx, changed);
        for (const slug of changed) await tx.query('select pg_notify($1, $2)', [ENTITY_CHANNEL, slug]);
        return result;
      });
    } finally {
      for (const slug of changed) this.cache?.invalidate(slug);
    }
  }

  private async validate(def: EntityDefinition, tx: Queryable): Promise<void> {
    const slugs = new Set((await tx.query<{ slug: string }>('select slug from entities')).map((r) => r.slug));
    const problems = definitionProblems(def, (slug) => slugs.has(slug));
    if (problems.length) throw validationFailed(problems);
  }

  private async save(def: EntityDefinition, tx: Queryable, changed: Set<string>, insert: boolean): Promise<StoredEntity> {
    changed.add(def.slug);
    const text = insert
      ? `insert into entities (slug, name, definition, field_order) values ($1, $2, $3, $4) returning definition, field_order, created_at, updated_at`
      : `update entities set name = $2, definition = $3, field_order = $4, updated_at = clock_timestamp() where slug = $1 returning definition, field_order, created_at, updated_at`;
    const [row] = await tx.query<CatalogueRow>(text, [def.slug, def.name, JSON.stringify(def), Object.keys(def.schema.fields)]);
    return this.fromRow(row!);
  }

  /** Runs a plan's changes in order; a precheck that finds records refuses the whole plan. */
  private async apply(def: EntityDefinition, plan: Plan, tx: Queryable): Promise<void> {
    await translating(def, async () => {
      for (const change of plan.changes) {
        if (change.precheck) {
          const [row] = await tx.query<{ n: number }>(change.precheck.sql);
          if (row && row.n > 0) {
            throw conflict('change_refused', `Cannot ${change.kind.replace('_', ' ')} ${change.field}: ${row.n} ${change.precheck.reason}`, {
              kind: change.kind,
              field: change.field,
              records: row.n,
              reason: change.precheck.reason,
            });
          }
        }
        await tx.query(change.sql);
      }
    });
  }

  async create(input: DefinitionInput): Promise<EntityView> {
    const def = normalise(input);
    return this.lockedTransaction(async (tx, changed) => {
      if (await this.find(def.slug, tx)) throw conflict('conflict', `Entity ${def.slug} already exists`, { field: 'slug' });
      await this.validate(def, tx);
      const stored = await this.save(def, tx, changed, true);
      await this.apply(def, planCreate(def), tx);
      return this.view(stored);
    });
  }

  /**
   * Applies a PATCH: the reconciler's plan is always returned; nothing changes when `dryRun`,
   * and destructive plans need `allowDestructive`. Everything runs in one transaction.
   */
  async update(slug: string, patch: DefinitionPatch, options: { dryRun: boolean; allowDestructive: boolean }) {
    return this.lockedTransaction(async (tx, changed) => {
      const current = await this.require(slug, tx);
      if (patch.slug !== undefined && patch.slug !== slug) throw validationFailed([{ field: 'slug', message: 'cannot be changed' }]);
      const merged = definitionSchema.safeParse(applyPatch(current.definition, patch));
      if (!merged.success) throw validationFailed(problemsOf(merged.error, 'body'));
      const next = normalise(merged.data);
      await this.validate(next, tx);
      const plan = reconcile(current.definition, next);
      if (plan.refusals.length) {
        const list = plan.refusals.map((r) => `${r.field} (${r.from} to ${r.to}): ${r.reason}`).join('; ');
        throw conflict('unsupported_change', `The reconciler cannot make these changes: ${list}`, { refusals: plan.refusals });
      }
      const dryRun = dryRunOf(plan);
      if (options.dryRun) return { entity: this.view(current), dry_run: dryRun, applied: false };
      if (plan.destructive && !options.allowDestructive) {
        throw conflict('destructive_change', 'The changes lose data; repeat with allow_destructive=true to apply them', { dry_run: dryRun });
      }
      await this.apply(next, plan, tx);
      return { entity: this.view(await this.save(next, tx, changed, false)), dry_run: dryRun, applied: true };
    });
  }

  /**
   * Deletes an entity and its table. While other entities' relations point at it the delete is
   * refused; `force` turns those relation fields into plain `uuid` fields (values kept, foreign
   * keys dropped) first.
   */
  async remove(slug: string, force: boolean) {
    return this.lockedTransaction(async (tx, changed) => {
      const current = await this.require(slug, tx);
      const rows = await tx.query<CatalogueRow>('select definition, field_order, created_at, updated_at from entities where slug <> $1', [slug]);
      const referencing = rows
        .map((row) => this.fromRow(row).definition)
        .flatMap((def) =>
          Object.entries(def.schema.fields)
            .filter(([, f]) => f.type === 'relation' && f.entity === slug)
            .map(([field]) => ({ def, field })),
        );
      const detached = referencing.map(({ def, field }) => ({ entity: def.slug, field }));
      if (referencing.length && !force) {
        throw conflict('entity_protected', `Relations point at ${slug}: ${detached.map((d) => `${d.entity}.${d.field}`).join(', ')}`, { entities: detached });
      }
      for (const def of new Set(referencing.map((r) => r.def))) {
        const fields = Object.fromEntries(
          Object.entries(def.schema.fields).map(([name, f]) => [
            name,
            f.type === 'relation' && f.entity === slug ? { ...stripRelation(f), type: 'uuid' as const } : f,
          ]),
        );
        const next: EntityDefinition = { ...def, schema: { fields } };
        await this.apply(next, reconcile(def, next), tx);
        await this.save(next, tx, changed, false);
      }
      await translating(current.definition, () => tx.query(`drop table ${qualifiedTable(slug)}`));
      await tx.query('delete from entities where slug = $1', [slug]);
      changed.add(slug);
      return { slug, deleted: true, detached };
    });
  }
}

function stripRelation<F extends { entity?: string }>(field: F): Omit<F, 'entity' | 'type'> {
  const { entity: _entity, type: _type, ...rest } = field as F & { type: string };
  return rest;
}

/** Throws 403 unless `actor` holds the capability `def` names for `action`. */
export function assertCan(actor: Actor, def: EntityDefinition, action: RecordAction): void {
  const capability = def.capabilities[action];
  if (!actor.can(capability)) throw forbidden(capability);
}
