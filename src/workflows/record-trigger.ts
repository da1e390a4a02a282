import type { RecordEvent } from '../records/record-events.js';
import type { Services } from '../services.js';

/**
 * The `record` trigger: a committed create, update or delete of a record starts a run of every
 * active workflow listening to that entity and action, with the change as payload. Wired in
 * the API process, where record events are published.
 */
export function wireRecordTrigger({ recordEvents, sql, workflows, executions, logger }: Services): () => void {
  return recordEvents.subscribe(async (event: RecordEvent) => {
    const targets = await sql.query<{ id: number }>(
      `select id from workflows where status = 'active' and trigger_type = 'record'
         and trigger->'config'->>'entity' = ? and trigger->'config'->'events' @> jsonb_build_array(?::text)`,
      [event.entity, event.action],
    );
    for (const { id } of targets) {
      try {
        const workflow = await workflows.get('system', id);
        const payload = { entity: event.entity, action: event.action, record: event.record, ...(event.previous ? { previous: event.previous } : {}) };
        await executions.start(workflow, { payload, trigger: 'record' });
      } catch (err) {
        logger.error({ err, workflow_id: id, entity: event.entity, action: event.action }, 'record trigger could not start a run');
      }
    }
  });
}
