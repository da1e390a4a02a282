import type { Services } from '../src/services.js';

/** Builds every activity with its dependencies; each activity forks its own EntityManager. */
export function createActivities(_services: Services) {
  return {};
}
