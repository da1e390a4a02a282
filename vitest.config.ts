import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'src/**/*.test.ts', 'workflows/**/*.test.ts'],
    // The cluster scenario suite has its own run: `npm run test:cluster` (vitest.cluster.config.ts).
    exclude: ['test/cluster/**', 'node_modules/**'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    // Two cores: one file per core; each file starts its own app (and worker when it needs one).
    maxWorkers: 2,
    testTimeout: 180_000,
    hookTimeout: 180_000,
    teardownTimeout: 60_000,
  },
});
