import type { RecordEvent } from '../records/record-events.js';
import type { ExecutionService } from '../executions/execution.service.js';
import type { Logger } from '../platform/logger.js';
import type { RecordEventBus } from '../records/record-events.js';
import type { WorkflowService } from './workflow.service.js';

export interface RecordTriggerPorts {
  recordEvents: RecordEventBus;
  workflows: WorkflowService;
  executions: ExecutionService;
  logger: Logger;
}

/**
 * The `record` trigger: a committed create, update or delete of a record starts a run of every
 * active workflow listening to that entity and action, with the change as payload. Wired in
 * the API process, where record events are published.
 */
export function wireRecordTrigger({ recordEvents, workflows, executions, logger }: RecordTriggerPorts): () => void {
  return recordEvents.subscribe(async (event: RecordEvent) => {
    for (const id of await workflows.listeningTo(event.entity, event.action)) {
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
