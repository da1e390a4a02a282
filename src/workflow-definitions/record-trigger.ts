import type { ActingUsers } from '../auth/acting.js';
import type { RecordEvent } from '../records/record-events.js';
import type { EntityService } from '../records/entity.service.js';
import type { ExecutionService } from '../executions/execution.service.js';
import type { Logger } from '../platform/logger.js';
import type { RecordEventBus } from '../records/record-events.js';
import type { WorkflowService } from './workflow.service.js';

export interface RecordTriggerPorts {
  recordEvents: RecordEventBus;
  workflows: WorkflowService;
  executions: ExecutionService;
  entities: Pick<EntityService, 'find'>;
  acting: Pick<ActingUsers, 'principal'>;
  logger: Logger;
}

/**
 * The `record` trigger: a committed create, update or delete of a record starts a run of every
 * active workflow listening to that entity and action, with the change as payload. A record goes
 * only to a workflow whose people (its owner and who wrote it last) may all read the entity: one
 * that lost the right (the entity's view capability changed, a role changed) gets nothing more.
 * Wired in the API process, where record events are published.
 */
export function wireRecordTrigger({ recordEvents, workflows, executions, entities, acting, logger }: RecordTriggerPorts): () => void {
  return recordEvents.subscribe(async (event: RecordEvent) => {
    const listening = await workflows.listeningTo(event.entity, event.action);
    if (!listening.length) return;
    const capability = (await entities.find(event.entity))?.definition.capabilities.view;
    for (const id of listening) {
      try {
        const workflow = await workflows.get('system', id);
        const people = workflows.authorsOf(workflow);
        const principal = await acting.principal(people, workflow.owner_id);
        if (!capability || !principal?.can(capability)) {
          logger.warn({ workflow_id: id, entity: event.entity, capability }, 'record trigger not delivered: its workflow may not read the entity');
          continue;
        }
        const payload = { entity: event.entity, action: event.action, record: event.record, ...(event.previous ? { previous: event.previous } : {}) };
        await executions.start(workflow, { payload, trigger: 'record' });
      } catch (err) {
        logger.error({ err, workflow_id: id, entity: event.entity, action: event.action }, 'record trigger could not start a run');
      }
    }
  });
}
