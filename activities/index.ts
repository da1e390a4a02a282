import type { Services } from '../src/services.js';
import { graphActivities } from './graph.activities.js';

/** Builds every activity with its dependencies (the activities-dependency-injection pattern). */
export function createActivities(services: Services) {
  const graph = graphActivities(services);
  return { ...graph.control, ...graph.nodes };
}

export type ControlActivities = ReturnType<typeof graphActivities>['control'];
export type NodeActivities = ReturnType<typeof graphActivities>['nodes'];
