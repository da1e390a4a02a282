import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createdTables, ownershipViolations, TABLE_OWNERS, type SourceFile } from './table-owners.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The service's code: src/, activities/ and workflows/, without the tests and the migrations (which own the schema). */
function sources(): SourceFile[] {
  const out: SourceFile[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.(ts|mts|mjs|js)$/.test(entry.name) && !/\.test\.ts$/.test(entry.name))
        out.push({ path: relative(root, path).split('\\').join('/'), text: readFileSync(path, 'utf8') });
    }
  };
  for (const dir of ['src', 'activities', 'workflows']) walk(join(root, dir));
  return out.filter((f) => !f.path.startsWith('src/migrations/'));
}

describe('one owner per table', () => {
  it('no file but its store writes a table', () => {
    expect(ownershipViolations(sources())).toEqual([]);
  });

  it('names an owner, an existing file, for every table the migrations create', () => {
    const dir = join(root, 'src/migrations');
    const migrations = readdirSync(dir).map((name) => readFileSync(join(dir, name), 'utf8'));
    const tables = createdTables(migrations);
    expect(tables.length).toBeGreaterThan(15);
    expect(tables.filter((t) => !TABLE_OWNERS[t])).toEqual([]);
    const files = new Set(sources().map((f) => f.path));
    expect(Object.values(TABLE_OWNERS).filter((path) => !files.has(path))).toEqual([]);
  });

  it('finds a planted write on a table outside its store, in SQL or through the ORM', () => {
    const planted: SourceFile[] = [
      { path: 'src/agent/agent.gate.ts', text: "await tx.query(`update agent_actions set status = 'approved' where action_id = ?`, [id]);" },
      { path: 'activities/agent.activities.ts', text: "await sql.query(\n  'insert into\n agent_actions (action_id) values (?)', [id]);" },
      { path: 'src/platform/x.ts', text: 'await sql.query(`DELETE FROM "sessions" where id = $1`, [id]);' },
      { path: 'src/auth/auth.service.ts', text: 'em.create(Session, { id, user, expiresAt });' },
      { path: 'src/main.ts', text: 'row.revokedAt = new Date();\nawait em.flush();' },
      { path: 'src/records/record-bulk.ts', text: 'await tx.query(`delete from ${qualifiedTable(def.slug)} where "uuid" = $1`, [id]);' },
    ];
    expect(ownershipViolations(planted).map((v) => [v.path, v.table])).toEqual([
      ['src/agent/agent.gate.ts', 'agent_actions'],
      ['activities/agent.activities.ts', 'agent_actions'],
      ['src/platform/x.ts', 'sessions'],
      ['src/auth/auth.service.ts', 'sessions'],
      ['src/main.ts', '(an ORM entity)'],
      ['src/records/record-bulk.ts', 'records.e_*'],
    ]);
  });

  it('lets the store write its own table, and reads and comments anywhere', () => {
    const allowed: SourceFile[] = [
      { path: 'src/agent/agent-action.store.ts', text: "await sql.query(`update agent_actions set status = 'expired' where action_id = ?`, [id]);" },
      { path: 'src/agent/agent.gate.ts', text: '// update agent_actions here? no: the store does\nawait sql.query(`select * from agent_actions for update`);' },
      { path: 'src/executions/x.ts', text: "await sql.query('insert into executions_archive (id) values (?)', [id]); // not the executions table" },
    ];
    expect(ownershipViolations(allowed)).toEqual([]);
  });
});
