import { defineConfig } from 'vitest/config';

// `npm run test:cluster`: the scenario suite against the production topology (`npm run cluster`'s
// startCluster on free ports). One file, one cluster, its tests in order: faults and the rolling
// upgrade build on what the earlier tests did, and the verdict checks all of it.
export default defineConfig({
  test: {
    include: ['test/cluster/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 1,
    testTimeout: 300_000,
    hookTimeout: 900_000,
    teardownTimeout: 120_000,
  },
});
