import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, normalize, relative, sep } from 'node:path';
import { createInterface } from 'node:readline';
import { Writable } from 'node:stream';
import { checkFile } from './definition.js';
import type { IdOf } from './references.js';
import { FILE_EXTENSIONS, parseFile, type FileProblem } from './workflow-file.js';
import type { Applied, Plan, WorkflowFileText } from './workflow-files.service.js';

/**
 * `svc workflows export|validate|plan|apply`: a folder of workflow files against any server of
 * the service, over its HTTP API (the same endpoints a CI script would call). The credentials
 * come from SVC_LOGIN / --login and SVC_APP_PASSWORD, or a prompt; never from a flag, so that
 * no password lands in a shell history or a CI log.
 */

export interface WorkflowsOptions {
  dir?: string | undefined;
  server?: string | undefined;
  login?: string | undefined;
  tag?: string | undefined;
  q?: string | undefined;
  prune?: boolean | undefined;
  plan?: string | undefined;
  json?: boolean | undefined;
}

export interface CliIo {
  env: NodeJS.ProcessEnv;
  out(text: string): void;
  err(text: string): void;
  /** Standard input is a terminal: a prompt may ask for what the environment lacks. */
  interactive: boolean;
  /** The server when neither --server nor SVC_SERVER names one. */
  defaultServer: string;
}

/** Exit codes: 0 done (plan: nothing would change), 2 a plan with changes, 1 an error. */
export const EXIT = { ok: 0, error: 1, changes: 2 } as const;

export class CliFailure extends Error {}

const usage = 'svc workflows export|validate|plan|apply --dir DIR [--server URL] [--tag T] [--prune] [--plan HASH] [--json]';

/** Runs one `svc workflows` subcommand and answers its exit code. */
export async function workflowsCommand(sub: string | undefined, options: WorkflowsOptions, io: CliIo): Promise<number> {
  try {
    if (!options.dir) throw new CliFailure(`--dir is required: ${usage}`);
    switch (sub) {
      case 'validate':
        return await validate(options.dir, options, io);
      case 'export':
        return await exportTo(options.dir, options, io);
      case 'plan':
        return await plan(options.dir, options, io);
      case 'apply':
        return await apply(options.dir, options, io);
      default:
        throw new CliFailure(`unknown subcommand ${sub ?? '(none)'}: ${usage}`);
    }
  } catch (err) {
    if (!(err instanceof CliFailure)) throw err;
    io.err(`${err.message}\n`);
    if (options.json) io.out(JSON.stringify({ status: 'fail', error: 'command_failed', message: err.message }) + '\n');
    return EXIT.error;
  }
}

/** Every `.yaml`/`.yml` file under `dir` (hidden folders skipped), with paths relative to it, sorted. */
export async function readFolder(dir: string): Promise<WorkflowFileText[]> {
  const files: WorkflowFileText[] = [];
  const walk = async (at: string) => {
    let entries;
    try {
      entries = await readdir(at, { withFileTypes: true });
    } catch (err) {
      throw new CliFailure(`cannot read ${at}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    for (const entry of entries) {
      if (entry.name.startsWith('.')) continue;
      const full = join(at, entry.name);
      if (entry.isDirectory()) await walk(full);
      else if (entry.isFile() && FILE_EXTENSIONS.some((e) => entry.name.endsWith(e))) {
        files.push({ path: relative(dir, full).split(sep).join('/'), content: await readFile(full, 'utf8') });
      }
    }
  };
  await walk(dir);
  return files.sort((a, b) => (a.path < b.path ? -1 : 1));
}

const describeProblem = (p: FileProblem) => `  ${p.file}${p.line ? `:${p.line}` : ''}${p.field ? `  ${p.field}` : ''}: ${p.message}`;

/** The checks that need no server: YAML, the file's fields, the definition's schema and its graph. */
export function validateFiles(files: WorkflowFileText[]): FileProblem[] {
  const problems: FileProblem[] = [];
  const slugs = new Map<string, string>();
  // Offline, every name stands for a thing of its own; the server resolves them on plan.
  const ids = new Map<string, number>();
  const idOf: IdOf = (kind, name) => ids.get(`${kind}:${name}`) ?? (ids.set(`${kind}:${name}`, ids.size + 1), ids.size);
  for (const file of files) {
    const parsed = parseFile(file.path, file.content);
    const slug = parsed.value?.slug;
    if (typeof slug === 'string') {
      const other = slugs.get(slug);
      if (other) problems.push({ file: file.path, field: 'slug', message: `${other} has the same slug; one file per workflow` });
      slugs.set(slug, file.path);
    }
    problems.push(...checkFile(parsed, idOf, { status: 'inactive' }).problems);
  }
  return problems;
}

async function validate(dir: string, options: WorkflowsOptions, io: CliIo): Promise<number> {
  const files = await readFolder(dir);
  const problems = validateFiles(files);
  if (options.json) io.out(JSON.stringify({ files: files.length, problems }) + '\n');
  else if (problems.length) io.err(`${problems.length} problem(s) in ${files.length} file(s):\n${problems.map(describeProblem).join('\n')}\n`);
  else io.out(`${files.length} file(s) valid.\n`);
  return problems.length ? EXIT.error : EXIT.ok;
}

// ---------------------------------------------------------------------------------------------
// Against a server

interface Server {
  url: string;
  call<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T>;
}

async function prompt(question: string, hidden: boolean): Promise<string> {
  let muted = false;
  const output = new Writable({
    write(chunk, _encoding, done) {
      if (!muted) process.stderr.write(chunk);
      done();
    },
  });
  const rl = createInterface({ input: process.stdin, output, terminal: true });
  try {
    return await new Promise<string>((resolve) => {
      rl.question(question, (answer) => resolve(answer));
      muted = hidden;
    });
  } finally {
    if (hidden) process.stderr.write('\n');
    rl.close();
  }
}

async function connect(options: WorkflowsOptions, io: CliIo): Promise<Server> {
  const url = (options.server ?? io.env.SVC_SERVER ?? io.defaultServer).replace(/\/+$/, '');
  if (!/^https?:\/\//.test(url)) throw new CliFailure(`--server must be an http(s) URL, not ${url}`);
  let login = options.login ?? io.env.SVC_LOGIN;
  let password = io.env.SVC_APP_PASSWORD;
  if (!login || !password) {
    if (!io.interactive) throw new CliFailure('set SVC_LOGIN (or --login) and SVC_APP_PASSWORD: the application password is never taken from a flag');
    login ??= await prompt(`Login for ${url}: `, false);
    password ??= await prompt(`Application password of ${login}: `, true);
  }
  const authorization = 'Basic ' + Buffer.from(`${login}:${password}`).toString('base64');
  return {
    url,
    async call<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
      let res: Response;
      try {
        res = await fetch(`${url}/api/workflow/v1${path}`, {
          method,
          headers: { authorization, accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
      } catch (err) {
        throw new CliFailure(`cannot reach ${url}: ${((err as Error).cause as Error | undefined)?.message ?? (err as Error).message}`);
      }
      const text = await res.text();
      let envelope: { status?: string; data?: unknown; error?: string; message?: string };
      try {
        envelope = JSON.parse(text);
      } catch {
        throw new CliFailure(`${url} answered ${res.status} without JSON: is it the workflow service?`);
      }
      if (res.ok && envelope.status === 'ok') return envelope.data as T;
      if (res.status === 401) throw new CliFailure(`${url} refused the credentials of ${login} (401): check SVC_LOGIN and SVC_APP_PASSWORD`);
      const problems = (envelope.data as { errors?: FileProblem[] } | undefined)?.errors;
      if (envelope.error === 'validation_failed' && problems?.every((p) => 'file' in p)) {
        throw new CliFailure(`${problems.length} problem(s), nothing applied:\n${problems.map(describeProblem).join('\n')}`);
      }
      throw new CliFailure(`${url}: ${res.status} ${envelope.error ?? ''}: ${envelope.message ?? text.slice(0, 500)}`);
    },
  };
}

async function exportTo(dir: string, options: WorkflowsOptions, io: CliIo): Promise<number> {
  const server = await connect(options, io);
  const query = new URLSearchParams({ ...(options.tag ? { tag: options.tag } : {}), ...(options.q ? { q: options.q } : {}) }).toString();
  const { files } = await server.call<{ files: WorkflowFileText[] }>('GET', `/export${query ? `?${query}` : ''}`);
  const before = await readFolder(dir).catch(() => [] as WorkflowFileText[]);
  for (const file of files) {
    const target = normalize(join(dir, file.path));
    // The server names the files; none may land outside the folder.
    if (isAbsolute(file.path) || relative(dir, target).startsWith('..')) throw new CliFailure(`refusing to write ${file.path} outside ${dir}`);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, file.content);
  }
  const written = new Set(files.map((f) => f.path));
  const others = before.map((f) => f.path).filter((p) => !written.has(p));
  if (options.json) io.out(JSON.stringify({ server: server.url, written: [...written], not_exported: others }) + '\n');
  else {
    io.out(`Wrote ${files.length} file(s) from ${server.url} to ${dir}.\n`);
    if (others.length) io.out(`Not on the server${options.tag ? ` with tag ${options.tag}` : ''} (left as they are): ${others.join(', ')}\n`);
  }
  return EXIT.ok;
}

function describePlan(plan: Plan, server: string): string {
  const count = (action: string) => plan.changes.filter((c) => c.action === action).length;
  const width = Math.max(4, ...plan.changes.map((c) => c.slug.length));
  const lines = [
    `Plan for ${server}: ${count('create')} to create, ${count('update')} to update, ${count('archive')} to archive, ${count('unchanged')} unchanged.`,
    ...plan.changes.map((c) => `  ${c.action.padEnd(9)}  ${c.slug.padEnd(width)}  ${c.path}`),
    `Plan hash: ${plan.plan_hash}`,
  ];
  const diffs = plan.changes.filter((c) => c.diff).map((c) => c.diff.trimEnd());
  return `${lines.join('\n')}\n${diffs.length ? `\n${diffs.join('\n\n')}\n` : ''}`;
}

const requestOf = async (dir: string, options: WorkflowsOptions) => ({
  files: await readFolder(dir),
  ...(options.prune ? { prune: true } : {}),
  ...(options.tag ? { tag: options.tag } : {}),
});

async function plan(dir: string, options: WorkflowsOptions, io: CliIo): Promise<number> {
  const server = await connect(options, io);
  const planned = await server.call<Plan>('POST', '/plan', await requestOf(dir, options));
  io.out(options.json ? JSON.stringify(planned) + '\n' : describePlan(planned, server.url));
  return planned.changes.some((c) => c.action !== 'unchanged') ? EXIT.changes : EXIT.ok;
}

async function apply(dir: string, options: WorkflowsOptions, io: CliIo): Promise<number> {
  if (options.plan !== undefined && !/^[0-9a-f]{64}$/.test(options.plan))
    throw new CliFailure('--plan takes the 64-hex plan hash that `svc workflows plan` printed');
  const server = await connect(options, io);
  let applied: Applied;
  try {
    applied = await server.call<Applied>('POST', '/apply', { ...(await requestOf(dir, options)), ...(options.plan ? { plan_hash: options.plan } : {}) });
  } catch (err) {
    if (err instanceof CliFailure && err.message.includes('plan_stale')) {
      throw new CliFailure(`the workflows or the files changed since plan ${options.plan}; nothing was applied. Plan again and review it.`);
    }
    throw err;
  }
  if (options.json) io.out(JSON.stringify(applied) + '\n');
  else {
    const done = applied.changes.filter((c) => c.action !== 'unchanged');
    io.out(`Applied to ${server.url}: ${done.length ? done.map((c) => `${c.action} ${c.slug}`).join(', ') : 'nothing to change'}.\n`);
    for (const w of applied.warnings) io.err(`warning: ${w.slug}: ${w.message}\n`);
  }
  return EXIT.ok;
}
