import type { Services } from '../src/services.js';
import { agentActivities } from './agent.activities.js';
import { approvalActivities } from './approval.activities.js';
import { currentExecution, graphActivities } from './graph.activities.js';
import { loopActivities } from './for-each.activities.js';
import { licenseWebhookActivities } from './license-webhook.activities.js';
import { waitActivities } from './wait.activities.js';

/** Builds every activity with its dependencies (the activities-dependency-injection pattern). */
export function createActivities(services: Services) {
  const graph = graphActivities(services);
  // The API of this process runs its runs' first calls ahead with this worker's steps.
  services.earlyRuns.serve(graph.ahead);
  // Waits and approvals find their run's record as every node does.
  const execution = (runId: string) => currentExecution(graph.worker, runId);
  return {
    ...graph.control,
    ...loopActivities(graph.worker),
    ...graph.nodes,
    ...waitActivities(services, execution),
    ...approvalActivities(services, execution),
    ...agentActivities(services),
    ...licenseWebhookActivities(services),
  };
}

/** The graph runs' steps besides their nodes: bookkeeping, child runs, and the steps of for_each loops. */
export type ControlActivities = ReturnType<typeof graphActivities>['control'] & ReturnType<typeof loopActivities>;
export type NodeActivities = ReturnType<typeof graphActivities>['nodes'];
export type AgentActivities = ReturnType<typeof agentActivities>;
export type WaitActivities = ReturnType<typeof waitActivities>;
export type ApprovalActivities = ReturnType<typeof approvalActivities>;
export type LicenseWebhookActivities = ReturnType<typeof licenseWebhookActivities>;
