import { defineConfig } from 'vitest/config';

/**
 * Two projects in one run (`npm test` runs both, so each test is counted once):
 * - `unit`: pure logic beside the code (src/, workflows/, activities/): no global set-up, no
 *   PostgreSQL, no Temporal, no listening socket; `npm run test:unit` runs only these, in seconds.
 * - `integration`: the suites in test/, against the real stack the global set-up starts (one
 *   PostgreSQL, one Temporal server and one workflow bundle for the whole run).
 * Vitest starts a project's global set-up only when the run holds files of that project, so a run
 * of unit files alone (`npx vitest run src/records`) starts no server either.
 */
export default defineConfig({
  test: {
    // Two cores: one file per core; each integration file starts its own app (and worker when it needs one).
    maxWorkers: 2,
    teardownTimeout: 60_000,
    projects: [
      {
        test: {
          name: 'unit',
          include: ['src/**/*.test.ts', 'workflows/**/*.test.ts', 'activities/**/*.test.ts'],
          pool: 'threads',
          isolate: false,
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          // The cluster scenario suite has its own run: `npm run test:cluster` (vitest.cluster.config.ts).
          exclude: ['test/cluster/**', 'node_modules/**'],
          globalSetup: ['test/global-setup.ts'],
          pool: 'forks',
          testTimeout: 180_000,
          hookTimeout: 180_000,
        },
      },
    ],
  },
});
