import type { Queryable, Sql } from '../db/sql.js';
import { toIso } from '../db/sql.js';
import type { ItemKey, ItemResult, LoopKey, NodeError } from '../../workflows/defs.js';

export type { ItemResult } from '../../workflows/defs.js';

/**
 * The items of for_each loops (`execution_items`) and the count of items each execution has
 * listed (`execution_item_budgets`); this module is the only one that writes them. A loop's
 * first step lists its items here, its items workflow reads them a page at a time and records
 * their results in batches, its body's activities keep outputs too large for Temporal's history
 * with the item, and the API lists them.
 */

export type ItemStatus = 'pending' | 'success' | 'failed' | 'skipped' | 'cancelled';

/** A page of items to run: inline when small enough, otherwise read by the activities that need them. */
export interface LoadedItem {
  index: number;
  item?: unknown;
}

export interface ItemRow {
  scope: number[];
  index: number;
  status: ItemStatus;
  input: unknown;
  output: unknown;
  error: NodeError | null;
  attempts: number;
  started_at: Date | string | null;
  finished_at: Date | string | null;
  duration_ms: number | null;
  reused: boolean;
}

export interface ItemCounts {
  total: number;
  pending: number;
  succeeded: number;
  failed: number;
  skipped: number;
  cancelled: number;
}

/** Why a list of items was refused before any of it was stored. */
export class ItemBudgetExceeded extends Error {
  constructor(
    readonly listed: number,
    readonly budget: number,
  ) {
    super(`The loops of this run would list more than ${budget} items in all`);
  }
}

/** Items written per statement when a list is stored. */
const PAGE = 1000;

const where = 'execution_id = ? and node_id = ? and scope = ?::int[]';
const keyOf = (loop: LoopKey) => [loop.execution, loop.node, loop.scope];

export class ExecutionItems {
  constructor(private readonly sql: Sql) {}

  /**
   * Stores the items of one loop run, once (a retried first step finds them stored and answers the
   * same), within the run's budget of items over all its loops (ItemBudgetExceeded). With
   * `reuseFrom` (a replay of failed items), each item that succeeded there with the same input is
   * carried over as it was, `reused`. Answers how many items there are and how many still run.
   */
  async list(loop: LoopKey, items: unknown[], budget: number, reuseFrom?: number): Promise<{ total: number; pending: number }> {
    return this.sql.transaction(async (tx) => {
      // The loops of one execution list their items one at a time, so the budget holds.
      await tx.query(`select pg_advisory_xact_lock(hashtext('execution-items'), hashtext(?::text))`, [loop.execution]);
      const stored = await this.countsOf(tx, loop);
      if (stored.total > 0) return { total: stored.total, pending: stored.pending };
      if (items.length) {
        const [claimed] = await tx.query(
          `insert into execution_item_budgets (execution_id, items) values (?, ?)
           on conflict (execution_id) do update set items = execution_item_budgets.items + excluded.items
             where execution_item_budgets.items + excluded.items <= ?
           returning items`,
          [loop.execution, items.length, budget],
        );
        if (!claimed || items.length > budget) throw new ItemBudgetExceeded(items.length, budget);
      }
      for (let from = 0; from < items.length; from += PAGE) {
        await tx.query(
          `insert into execution_items (execution_id, node_id, scope, index, input)
           select ?, ?, ?::int[], t.ordinality::int - 1 + ?, t.value from jsonb_array_elements(?::jsonb) with ordinality as t
           on conflict do nothing`,
          [...keyOf(loop), from, JSON.stringify(items.slice(from, from + PAGE))],
        );
      }
      if (reuseFrom !== undefined && items.length) {
        await tx.query(
          `update execution_items i set status = 'success', output = o.output, attempts = o.attempts, started_at = o.started_at,
                  finished_at = o.finished_at, duration_ms = o.duration_ms, reused = true
             from execution_items o
            where i.execution_id = ? and i.node_id = ? and i.scope = ?::int[]
              and o.execution_id = ? and o.node_id = i.node_id and o.scope = i.scope and o.index = i.index
              and o.status = 'success' and o.input is not distinct from i.input`,
          [...keyOf(loop), reuseFrom],
        );
      }
      const counts = await this.countsOf(tx, loop);
      return { total: counts.total, pending: counts.pending };
    });
  }

  /**
   * The next items to run after index `after`, at most `limit`, in index order: each inline when
   * its JSON is at most `inlineBytes`, otherwise by reference (fewer than `limit`: no more are left).
   */
  async page(loop: LoopKey, after: number, limit: number, inlineBytes: number): Promise<{ items: LoadedItem[] }> {
    const rows = await this.sql.query<{ index: number; input: unknown; bytes: number }>(
      `select index, case when octet_length(input::text) <= ? then input end as input, octet_length(input::text) as bytes
         from execution_items where ${where} and status = 'pending' and index > ? order by index limit ?`,
      [inlineBytes, ...keyOf(loop), after, limit],
      { prepared: true },
    );
    return {
      items: rows.map((r) => (r.bytes <= inlineBytes ? { index: r.index, item: r.input ?? null } : { index: r.index })),
    };
  }

  /** The indexes of a loop run's items still to run. */
  async pendingIndexes(loop: LoopKey): Promise<number[]> {
    const rows = await this.sql.query<{ index: number }>(`select index from execution_items where ${where} and status = 'pending' order by index`, keyOf(loop));
    return rows.map((r) => r.index);
  }

  /**
   * Carries the items of loops a replay reuses (`nodeIds`: the loops and those nested in their
   * bodies) into the replay's execution, marked reused, so the reused loops list their items there.
   */
  async copy(from: number, to: number, nodeIds: string[], q: Queryable = this.sql): Promise<void> {
    if (!nodeIds.length) return;
    await q.query(
      `insert into execution_items (execution_id, node_id, scope, index, status, input, output, error, refs, attempts, started_at, finished_at, duration_ms, reused)
       select ?, node_id, scope, index, status, input, output, error, refs, attempts, started_at, finished_at, duration_ms, true
         from execution_items where execution_id = ? and node_id = any(?)
       on conflict do nothing`,
      [to, from, nodeIds],
    );
  }

  /** Records a batch of results in one statement; an item already ended is left as it is (a retried batch). */
  async record(loop: LoopKey, results: ItemResult[]): Promise<void> {
    if (!results.length) return;
    const rows = results.map((r) => ({
      index: r.index,
      status: r.status,
      output: r.output === undefined ? null : r.output,
      kept: r.kept ?? null,
      child: r.child ?? null,
      error: r.error ?? null,
      attempts: r.attempts,
      started_ms: r.startedAt,
      duration_ms: r.durationMs,
    }));
    await this.sql.query(
      `update execution_items i set status = r.status,
              output = case when r.kept is not null then i.refs -> r.kept
                            when r.child is not null then (select e.last_output from executions e where e.id = r.child)
                            else r.output end,
              error = r.error, attempts = greatest(i.attempts, r.attempts),
              started_at = to_timestamp(r.started_ms / 1000.0), finished_at = to_timestamp((r.started_ms + r.duration_ms) / 1000.0),
              duration_ms = r.duration_ms
         from jsonb_to_recordset(?::jsonb) as r(index int, status text, output jsonb, kept text, child bigint, error jsonb, attempts int,
                                                started_ms float8, duration_ms int)
        where i.${where.replace(/ and /g, ' and i.')} and i.index = r.index and i.status = 'pending'`,
      [JSON.stringify(rows), ...keyOf(loop)],
      { prepared: true },
    );
  }

  /** Keeps a value of an item's body (a node's output too large for history) under `key`. */
  async keep(item: ItemKey, key: string, value: unknown): Promise<void> {
    await this.sql.query(
      `update execution_items set refs = coalesce(refs, '{}'::jsonb) || jsonb_build_object(?::text, ?::jsonb) where ${where} and index = ?`,
      [key, JSON.stringify(value ?? null), ...keyOf(item), item.index],
    );
  }

  /** A body node failed after `attempts` attempts: the item shows at least that many. */
  async noteAttempts(item: ItemKey, attempts: number): Promise<void> {
    await this.sql.query(`update execution_items set attempts = greatest(attempts, ?) where ${where} and index = ?`, [attempts, ...keyOf(item), item.index]);
  }

  /**
   * Values kept with items, for an activity that needs them: the inputs of `items` and the kept
   * values named in `kept`. Missing ones read as undefined (the caller refuses them).
   */
  async read(items: ItemKey[], kept: { item: ItemKey; key: string }[]): Promise<{ inputs: Map<string, unknown>; kept: Map<string, unknown> }> {
    const inputs = new Map<string, unknown>();
    const values = new Map<string, unknown>();
    // One statement for every item asked for, its input (no key) or one kept value (its key).
    const wanted = [...items.map((item) => ({ item, key: null as string | null })), ...kept];
    if (!wanted.length) return { inputs, kept: values };
    const rows = await this.sql.query<{ ord: string; input: unknown; found: boolean; value: unknown }>(
      `select w.ord, case when w.key is null then i.input end as input,
              w.key is not null and i.refs is not null and jsonb_exists(i.refs, w.key) as found,
              case when w.key is not null then i.refs -> w.key end as value
         from unnest(?::bigint[], ?::text[], ?::text[], ?::int[], ?::text[]) with ordinality as w(execution_id, node_id, scope, index, key, ord)
         join execution_items i on i.execution_id = w.execution_id and i.node_id = w.node_id and i.scope = w.scope::int[] and i.index = w.index`,
      [
        wanted.map((w) => w.item.execution),
        wanted.map((w) => w.item.node),
        wanted.map((w) => `{${w.item.scope.join(',')}}`),
        wanted.map((w) => w.item.index),
        wanted.map((w) => w.key),
      ],
    );
    for (const row of rows) {
      const { item, key } = wanted[Number(row.ord) - 1]!;
      if (key === null) inputs.set(itemId(item), row.input);
      else if (row.found) values.set(`${itemId(item)}:${key}`, row.value);
    }
    return { inputs, kept: values };
  }

  /**
   * Ends a loop run: items that never ran are marked `left` (skipped when the loop stopped at a
   * failure or continued no further, cancelled when the run was cancelled). Answers the counts.
   */
  async close(loop: LoopKey, left: 'skipped' | 'cancelled'): Promise<ItemCounts> {
    await this.sql.query(`update execution_items set status = ? where ${where} and status = 'pending'`, [left, ...keyOf(loop)]);
    return this.countsOf(this.sql, loop);
  }

  /**
   * The outputs of a loop run's items in index order (null for an item without one), while their
   * JSON stays within `limitBytes` (with the brackets and commas of the list); undefined beyond it.
   */
  async results(loop: LoopKey, total: number, limitBytes: number): Promise<unknown[] | undefined> {
    const results: unknown[] = [];
    let bytes = 2 + Math.max(0, total - 1);
    for (let from = 0; from < total; from += PAGE) {
      const rows = await this.sql.query<{ output: string | null }>(
        `select output::text as output from execution_items where ${where} and index >= ? and index < ? order by index`,
        [...keyOf(loop), from, from + PAGE],
      );
      for (const row of rows) {
        const text = row.output ?? 'null';
        bytes += Buffer.byteLength(text);
        if (bytes > limitBytes) return undefined;
        results.push(JSON.parse(text));
      }
    }
    return results;
  }

  /** The input of an item: a `workflow_id` body's child payload `{item, index}` when too large for history. */
  async itemPayload(item: ItemKey): Promise<{ item: unknown; index: number } | undefined> {
    const [row] = await this.sql.query<{ input: unknown }>(`select input from execution_items where ${where} and index = ?`, [...keyOf(item), item.index]);
    return row ? { item: row.input ?? null, index: item.index } : undefined;
  }

  /**
   * A page of one loop's items for the API: of one `scope` (all scopes when undefined), with one
   * status, ordered by scope and index.
   */
  async listPage(
    executionId: number,
    nodeId: string,
    query: { scope?: number[]; status?: ItemStatus; page: number; per_page: number },
  ): Promise<{ rows: ItemRow[]; total: number }> {
    const conditions = ['execution_id = ?', 'node_id = ?'];
    const args: unknown[] = [executionId, nodeId];
    if (query.scope) {
      conditions.push('scope = ?::int[]');
      args.push(query.scope);
    }
    if (query.status) {
      conditions.push('status = ?');
      args.push(query.status);
    }
    const clause = conditions.join(' and ');
    const [{ total }] = (await this.sql.query<{ total: string }>(`select count(*) as total from execution_items where ${clause}`, args)) as [{ total: string }];
    const rows = await this.sql.query<ItemRow>(
      `select scope, index, status, input, output, error, attempts, started_at, finished_at, duration_ms, reused
         from execution_items where ${clause} order by scope, index limit ? offset ?`,
      [...args, query.per_page, (query.page - 1) * query.per_page],
    );
    return { rows, total: Number(total) };
  }

  /** What a replay of a loop's failed items would do with them: how many succeeded (kept when their input is the same) and how many run again. */
  async replayCounts(executionId: number, nodeId: string): Promise<{ reused: number; run: number }> {
    const [row] = await this.sql.query<{ reused: number; run: number }>(
      `select count(*) filter (where status = 'success')::int as reused, count(*) filter (where status <> 'success')::int as run
         from execution_items where execution_id = ? and node_id = ? and scope = '{}'`,
      [executionId, nodeId],
    );
    return row ?? { reused: 0, run: 0 };
  }

  /** The counts of every loop of the graph itself (scope `{}`) in an execution, by node. */
  async countsByNode(executionId: number): Promise<Map<string, ItemCounts>> {
    const rows = await this.sql.query<{ node_id: string; status: ItemStatus; n: string }>(
      `select node_id, status, count(*) as n from execution_items where execution_id = ? and scope = '{}' group by node_id, status`,
      [executionId],
    );
    const counts = new Map<string, ItemCounts>();
    for (const row of rows) {
      const c = counts.get(row.node_id) ?? emptyCounts();
      addCount(c, row.status, Number(row.n));
      counts.set(row.node_id, c);
    }
    return counts;
  }

  private async countsOf(q: Queryable, loop: LoopKey): Promise<ItemCounts> {
    const rows = await q.query<{ status: ItemStatus; n: string }>(
      `select status, count(*) as n from execution_items where ${where} group by status`,
      keyOf(loop),
    );
    const counts = emptyCounts();
    for (const row of rows) addCount(counts, row.status, Number(row.n));
    return counts;
  }
}

/** An item's identity as a map key. */
export const itemId = (item: ItemKey) => `${item.execution}:${item.node}:${item.scope.join('.')}:${item.index}`;

const emptyCounts = (): ItemCounts => ({ total: 0, pending: 0, succeeded: 0, failed: 0, skipped: 0, cancelled: 0 });

function addCount(counts: ItemCounts, status: ItemStatus, n: number): void {
  counts.total += n;
  if (status === 'success') counts.succeeded += n;
  else counts[status] += n;
}

/** An item as the API shows it. */
export function itemView(row: ItemRow) {
  return {
    scope: row.scope,
    index: row.index,
    status: row.status,
    input: row.input ?? null,
    output: row.output ?? null,
    error: row.error ?? null,
    attempts: row.attempts,
    started_at: toIso(row.started_at),
    finished_at: toIso(row.finished_at),
    duration_ms: row.duration_ms,
    reused: row.reused,
  };
}
