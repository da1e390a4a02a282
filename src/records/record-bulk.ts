import { z } from 'zod';
import { named } from '../http/openapi.js';
import { AppError, invalidRequest } from '../platform/errors.js';
import type { Transaction } from '../db/sql.js';
import type { StoredEntity } from './entity.service.js';
import type { RecordEvent } from './record-events.js';

/** Bulk record operations: one transaction, a savepoint per operation, a result per operation. */

export const MAX_BULK_OPERATIONS = 100;

export const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const bulkOperationSchema = z.strictObject({
  op: z.enum(['create', 'update', 'delete']),
  fields: z.record(z.string(), z.unknown()).optional().describe('field map, for create and update'),
  uuid: z.string().optional().describe('record uuid, for update and delete'),
});

named(bulkOperationSchema, 'BulkOperation', { description: 'One create, update or delete of a bulk call' });

export type BulkOperation = z.infer<typeof bulkOperationSchema>;

export interface BulkItemResult {
  index: number;
  op: BulkOperation['op'];
  status: 'ok' | 'error';
  uuid: string | null;
  error?: { code: string; message: string; data?: Record<string, unknown> };
}

export interface BulkResult {
  results: BulkItemResult[];
  ok: number;
  failed: number;
}

/** The record writes a bulk operation makes (RecordService's, on the bulk's transaction). */
interface Writer {
  insert(sql: Transaction, entity: StoredEntity, body: Record<string, unknown>): Promise<RecordEvent>;
  change(sql: Transaction, entity: StoredEntity, uuid: string, body: Record<string, unknown>): Promise<RecordEvent>;
  delete(sql: Transaction, entity: StoredEntity, uuid: string): Promise<RecordEvent>;
}

/** Problems with an operation that the list's shape cannot express (a missing uuid, say). */
function checkOperation(op: BulkOperation): void {
  if (op.op === 'create' && op.uuid !== undefined) throw invalidRequest('create takes no uuid: the service assigns it');
  if (op.op !== 'create') {
    if (op.uuid === undefined) throw invalidRequest(`${op.op} needs the uuid of the record`);
    if (!uuidPattern.test(op.uuid)) throw invalidRequest('uuid is not a UUID');
  }
  if (op.op === 'update' && op.fields === undefined) throw invalidRequest('update needs fields');
  if (op.op === 'delete' && op.fields !== undefined) throw invalidRequest('delete takes no fields');
}

function run(tx: Transaction, writer: Writer, entity: StoredEntity, op: BulkOperation): Promise<RecordEvent> {
  switch (op.op) {
    case 'create':
      return writer.insert(tx, entity, op.fields ?? {});
    case 'update':
      return writer.change(tx, entity, op.uuid!, op.fields!);
    case 'delete':
      return writer.delete(tx, entity, op.uuid!);
  }
}

/**
 * Runs the operations in order inside `tx`. A domain failure (validation, conflict, missing
 * record) rolls back only its savepoint and is reported in its result; anything unexpected
 * propagates and rolls back the whole call.
 */
export async function runBulk(tx: Transaction, writer: Writer, entity: StoredEntity, operations: BulkOperation[]) {
  const results: BulkItemResult[] = [];
  const events: RecordEvent[] = [];
  for (const [index, op] of operations.entries()) {
    try {
      checkOperation(op);
      const event = await tx.savepoint(() => run(tx, writer, entity, op));
      if (event.record !== event.previous) events.push(event);
      results.push({ index, op: op.op, status: 'ok', uuid: event.record.uuid });
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      results.push({
        index,
        op: op.op,
        status: 'error',
        uuid: op.op === 'create' ? null : (op.uuid ?? null),
        error: { code: err.code, message: err.message, ...(err.data ? { data: err.data } : {}) },
      });
    }
  }
  const ok = results.filter((r) => r.status === 'ok').length;
  return { result: { results, ok, failed: results.length - ok }, events };
}
