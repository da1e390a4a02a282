/**
 * Which module writes which table: every table of the service has exactly one owner, its store,
 * and no other file issues an INSERT, UPDATE or DELETE on it, nor an ORM write on its entity
 * (docs/data-access.md). `table-owners.test.ts` checks the source against this map.
 */
export const TABLE_OWNERS: Readonly<Record<string, string>> = {
  users: 'src/auth/user.store.ts',
  app_passwords: 'src/auth/user.store.ts',
  sessions: 'src/auth/user.store.ts',
  agent_sessions: 'src/agent/agent.store.ts',
  agent_messages: 'src/agent/agent.store.ts',
  agent_actions: 'src/agent/agent-action.store.ts',
  agent_action_votes: 'src/agent/agent-action.store.ts',
  workflow_events: 'src/events/event.store.ts',
  workflow_event_waits: 'src/events/event.store.ts',
  connections: 'src/connections/connection.service.ts',
  workflows: 'src/workflow-definitions/workflow.service.ts',
  workflow_versions: 'src/workflow-definitions/workflow.service.ts',
  executions: 'src/executions/execution.mirror.ts',
  execution_nodes: 'src/executions/execution.mirror.ts',
  execution_child_runs: 'src/executions/execution.mirror.ts',
  execution_items: 'src/executions/execution-items.store.ts',
  execution_item_budgets: 'src/executions/execution-items.store.ts',
  idempotency_keys: 'src/executions/idempotency.store.ts',
  entities: 'src/records/entity.service.ts',
  licenses: 'src/licenses/license.store.ts',
  license_activations: 'src/licenses/license.store.ts',
  license_signing_keys: 'src/licenses/license.keys.ts',
  license_webhooks: 'src/licenses/license-webhook.store.ts',
  license_webhook_deliveries: 'src/licenses/license-webhook.store.ts',
  license_webhook_attempts: 'src/licenses/license-webhook.store.ts',
  rate_limit_windows: 'src/platform/rate-limit.ts',
  rate_limit_counters: 'src/platform/rate-limit.ts',
};

/**
 * The record tables (`records.e_<slug>`, one per entity, built at run time): their rows have one
 * owner; their definition (create, alter, drop) is the entity store's, through the reconciler.
 */
export const RECORD_ROWS_OWNER = 'src/records/record.service.ts';
const RECORD_WRITE = /\b(insert\s+into|update|delete\s+from)\s+\$\{qualifiedTable\(/gi;

/** The MikroORM entities and the tables they map. */
export const ENTITY_TABLES: Readonly<Record<string, string>> = {
  User: 'users',
  AppPassword: 'app_passwords',
  Session: 'sessions',
  License: 'licenses',
  LicenseActivation: 'license_activations',
};

export interface SourceFile {
  /** Relative to the repository, with forward slashes. */
  path: string;
  text: string;
}

export interface Violation {
  path: string;
  line: number;
  table: string;
  statement: string;
}

/** Comment lines say what code does; only code is checked. */
const codeOnly = (text: string) => text.replace(/\/\*[\s\S]*?\*\//g, (block) => block.replace(/[^\n]/g, ' ')).replace(/^\s*\/\/.*$/gm, '');

const tables = Object.keys(TABLE_OWNERS)
  .sort((a, b) => b.length - a.length)
  .join('|');
const SQL_WRITE = new RegExp(`\\b(insert\\s+into|update|delete\\s+from)\\s+(?:only\\s+)?"?(${tables})"?(?![\\w"])`, 'gi');
const entities = Object.keys(ENTITY_TABLES).join('|');
/** An ORM write naming its entity: em.create(User, ...), em.nativeUpdate(Session, ...), em.insert(License, ...). */
const ORM_ENTITY_WRITE = new RegExp(`\\.(create|nativeUpdate|nativeDelete|insert|insertMany|upsert|upsertMany)\\(\\s*(${entities})\\b`, 'g');
/** An ORM write on an entity instance (the unit of work): only a store of an ORM-mapped table flushes. */
const ORM_UNIT_OF_WORK = /\bem\.(flush|persist|persistAndFlush|assign|remove|removeAndFlush)\(/g;

const lineOf = (text: string, index: number) => text.slice(0, index).split('\n').length;

/** Every write in `files` on a table by a file other than the table's store. */
export function ownershipViolations(files: SourceFile[]): Violation[] {
  const ormOwners = new Set(Object.values(ENTITY_TABLES).map((t) => TABLE_OWNERS[t]));
  const out: Violation[] = [];
  for (const file of files) {
    const text = codeOnly(file.text);
    for (const m of text.matchAll(SQL_WRITE)) {
      const table = m[2]!.toLowerCase();
      if (TABLE_OWNERS[table] !== file.path) out.push({ path: file.path, line: lineOf(text, m.index), table, statement: m[0].replace(/\s+/g, ' ') });
    }
    for (const m of text.matchAll(RECORD_WRITE)) {
      if (file.path !== RECORD_ROWS_OWNER) out.push({ path: file.path, line: lineOf(text, m.index), table: 'records.e_*', statement: m[0] });
    }
    for (const m of text.matchAll(ORM_ENTITY_WRITE)) {
      const table = ENTITY_TABLES[m[2]!]!;
      if (TABLE_OWNERS[table] !== file.path) out.push({ path: file.path, line: lineOf(text, m.index), table, statement: m[0] });
    }
    for (const m of text.matchAll(ORM_UNIT_OF_WORK)) {
      if (!ormOwners.has(file.path)) out.push({ path: file.path, line: lineOf(text, m.index), table: '(an ORM entity)', statement: m[0] });
    }
  }
  return out;
}

/** The tables the migrations create (the map must name an owner for each). */
export function createdTables(migrations: string[]): string[] {
  const names = new Set<string>();
  for (const text of migrations)
    for (const m of text.matchAll(/\bcreate\s+(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?"?(\w+)"?\s*\(/gi)) names.add(m[1]!);
  return [...names].sort();
}
