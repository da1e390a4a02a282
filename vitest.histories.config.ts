import { defineConfig } from 'vitest/config';

// `npm run histories:record -- <set>`: records the histories test/replay.test.ts replays.
export default defineConfig({
  test: {
    include: ['test/histories/record.histories.ts'],
    globalSetup: ['test/global-setup.ts'],
    pool: 'forks',
    maxWorkers: 1,
    testTimeout: 300_000,
    hookTimeout: 180_000,
  },
});
