import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { runToEnd } from '../platform/child-process.js';
import type { Logger } from '../platform/logger.js';
import { goInstallEnv, isExecutable, onPath, userCacheRoot } from '../platform/temporal-cli.js';

/**
 * The Temporal server, its sql tool and the Web UI server of `npm run cluster`, built from their
 * Go modules at the versions the pinned Temporal CLI (v1.5.1) embeds, so the cluster runs the same
 * server as the embedded default. Found like the CLI (src/platform/temporal-server.ts, whose
 * PATH-and-cache lookup this mirrors): PATH (only a binary that reports the pinned version), the
 * project's `.cache/`, the per-user cache; failing those, built once into the per-user cache with
 * `go install` (a few minutes; the Go module cache is shared with the CLI's build).
 */
export interface GoTool {
  /** The name the binary has in the per-user cache and in Temporal's images. */
  name: string;
  /** Go package path to `go install`. */
  pkg: string;
  /** What `<binary> --version` prints for the pinned version. */
  version: RegExp;
}

export interface GoModule {
  /** Directory under the caches: `<cache>/<dir>/<version>/<tool name>`. */
  dir: string;
  module: string;
  version: string;
  tools: GoTool[];
}

export const TEMPORAL_SERVER: GoModule = {
  dir: 'temporal-server',
  module: 'go.temporal.io/server',
  version: 'v1.29.1',
  tools: [
    { name: 'temporal-server', pkg: 'go.temporal.io/server/cmd/server', version: /\b1\.29\.1\b/ },
    { name: 'temporal-sql-tool', pkg: 'go.temporal.io/server/cmd/tools/sql', version: /\b1\.29\.1\b/ },
  ],
};

export const TEMPORAL_UI: GoModule = {
  dir: 'temporal-ui',
  module: 'github.com/temporalio/ui-server/v2',
  version: 'v2.42.1',
  tools: [{ name: 'ui-server', pkg: 'github.com/temporalio/ui-server/v2/cmd/server', version: /\b2\.42\.1\b/ }],
};

const versionOf = (binary: string) => new Promise<string>((ok) => execFile(binary, ['--version'], { timeout: 10_000 }, (err, stdout) => ok(err ? '' : stdout)));

/** Where each tool of `mod` is: name -> absolute path. Builds the module's tools when missing. */
export async function provisionGoModule(mod: GoModule, logger: Logger): Promise<Record<string, string>> {
  const caches = [resolve('.cache', mod.dir, mod.version), join(userCacheRoot(), mod.dir, mod.version)];
  const found: Record<string, string> = {};
  for (const tool of mod.tools) {
    for (const candidate of onPath(process.env, tool.name).filter(isExecutable)) {
      if (tool.version.test(await versionOf(candidate))) {
        found[tool.name] = candidate;
        break;
      }
    }
    found[tool.name] ??= caches.map((dir) => join(dir, tool.name)).find(isExecutable) ?? '';
  }
  if (mod.tools.every((t) => found[t.name])) return found;
  const target = caches[1]!;
  await build(mod, target, logger);
  return Object.fromEntries(mod.tools.map((t) => [t.name, join(target, t.name)]));
}

async function build(mod: GoModule, target: string, logger: Logger): Promise<void> {
  const go = onPath(process.env, 'go').find(isExecutable);
  if (!go) {
    throw new Error(
      `${mod.tools.map((t) => t.name).join(' and ')} (${mod.module}@${mod.version}) were not found on PATH or in ${target}, and Go is not installed to build them; install Go, or put the binaries there`,
    );
  }
  await mkdir(target, { recursive: true });
  // Built into a directory of this process's own, then moved into place: two clones building at
  // once never see a half-written binary.
  const staging = await mkdtemp(join(target, '.build-'));
  const packages = mod.tools.map((t) => `${t.pkg}@${mod.version}`);
  logger.info({ target, packages }, `building ${mod.module}@${mod.version} with go install; the first build takes a few minutes`);
  const started = Date.now();
  const progress = setInterval(() => logger.info(`still building ${mod.module} (${Math.round((Date.now() - started) / 1000)}s)`), 15_000);
  try {
    await runToEnd(`go install ${packages.join(' ')}`, go, ['install', ...packages], goInstallEnv(process.env, staging), 8000);
    for (const tool of mod.tools) {
      // `go install` names a binary after its package's directory (`server`, `sql`).
      const built = join(staging, basename(tool.pkg));
      if (!existsSync(built)) throw new Error(`go install finished but ${built} is missing`);
      await rename(built, join(target, tool.name));
    }
  } finally {
    clearInterval(progress);
    await rm(staging, { recursive: true, force: true });
  }
  logger.info({ target, seconds: Math.round((Date.now() - started) / 1000) }, `${mod.module}@${mod.version} built`);
}
