import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, loadDotEnv, type Config } from './config.js';
import { withDatabase } from './cli/database.js';
import { migrate } from './db/orm.js';
import { createLicenseBody, type LicenseView } from './licenses/license.schemas.js';
import type { PublicKeyEntry } from './licenses/license.signature.js';
import { AppError, validationFailed } from './platform/errors.js';
import { createLogger, type Logger } from './platform/logger.js';
import { untilStopped } from './platform/signals.js';
import { loadKeyRing, startStack } from './stack.js';
import { createCommandServices } from './services.js';
import { findTemporalCli } from './platform/temporal-cli.js';
import { bundleWorkflows } from './temporal/worker.js';
import { runClusterCommand } from './cluster/command.js';
import { workflowsCommand } from './workflow-files/workflow-files.cli.js';
import { TEMPORAL_SERVER, TEMPORAL_UI, provisionGoModule } from './cluster/binaries.js';

const usage = `Usage: svc <command> [options]   (npm run svc -- <command>)

Commands:
  start                          everything SVC_ROLE asks for; embedded PostgreSQL and Temporal
                                 when DATABASE_URL / TEMPORAL_ADDRESS are unset
  api                            the HTTP API only (needs DATABASE_URL and TEMPORAL_ADDRESS)
  worker                         the Temporal worker only (needs DATABASE_URL and TEMPORAL_ADDRESS)
  cluster                        the production topology on this machine (npm run cluster): PostgreSQL,
                                 the Temporal server and Web UI, 2 APIs and 2 workers (docs/operators.md)
  migrate                        apply pending database migrations
  user create --login L --role R [--password P] [--email E]
  app-password create --login L --name N
  app-password revoke --login L --name N
  license create --product-slug S --product-name N --domain-limit K [--expires-at T] [--status S]
                                 issue a licence; prints its token (once) and reference id
  license show <key>             a licence by token or reference id (also --key)
  license revoke <key>           set a licence to revoked (also --key)
  license keys                   the public keys that sign licence answers (to pin in a plugin)
  license rotate-key             retire the signing key and make a new one, endorsed by the old
  bundle-workflows --out FILE    prebuild the workflow bundle (SVC_WORKFLOW_BUNDLE)
  temporal-cli                   find, download or build the Temporal CLI and print its path
  cluster-binaries               find or build the Temporal server, sql tool and Web UI of npm run cluster
  workflows export --dir DIR [--tag T] [--q TEXT]
                                 write the workflows you see on --server as one YAML file each
  workflows validate --dir DIR   check the files offline (YAML, fields, node configurations, graph)
  workflows plan --dir DIR [--prune] [--tag T]
                                 what applying would change, with diffs; exit 0 nothing, 2 changes, 1 error
  workflows apply --dir DIR [--plan HASH] [--prune] [--tag T]
                                 apply all or nothing (only that plan, with --plan)
                                 --server URL (or SVC_SERVER; default this machine's PORT); the login
                                 from --login or SVC_LOGIN, the password from SVC_APP_PASSWORD (or a prompt)

Every command accepts --json and then prints exactly one JSON object on stdout.`;

type Flags = Record<string, string | boolean | undefined>;

function required(flags: Flags, name: string): string {
  const value = flags[name];
  if (typeof value !== 'string' || !value) throw new AppError('invalid_request', `--${name} is required`);
  return value;
}

/** Reads `license create` flags with the same schema as the management API. */
function licenseInput(flags: Flags) {
  const limit = required(flags, 'domain-limit');
  const parsed = createLicenseBody.safeParse({
    product_slug: required(flags, 'product-slug'),
    product_name: required(flags, 'product-name'),
    domain_limit: /^\d+$/.test(limit) ? Number(limit) : limit,
    ...(typeof flags['expires-at'] === 'string' ? { expires_at: flags['expires-at'] } : {}),
    ...(typeof flags.status === 'string' ? { status: flags.status } : {}),
  });
  if (parsed.success) return parsed.data;
  throw validationFailed(parsed.error.issues.map((i) => ({ field: `--${String(i.path[0] ?? '').replace(/_/g, '-')}`, message: i.message })));
}

function describeKeys(keys: PublicKeyEntry[]): string {
  return keys
    .map((k) =>
      [
        `${k.status === 'current' ? 'Current' : 'Retired'} key ${k.key_id} (ed25519), created ${k.created_at}${k.valid_until ? `, valid until ${k.valid_until}` : ''}`,
        `  public key: ${k.public_key}`,
        ...(k.endorsement ? [`  endorsed by ${k.endorsement.key_id}`] : []),
      ].join('\n'),
    )
    .join('\n');
}

function describeLicense(l: LicenseView): string {
  return [
    `Licence ${l.id} (${l.reference_id}): ${l.product_name} [${l.product_slug}]`,
    `  status ${l.status}; ${l.active_domains} of ${l.domain_limit} domains in use; ${l.expires_at ? `expires ${l.expires_at}` : 'no expiry'}`,
  ].join('\n');
}

/** Prints a command's result: one JSON object with --json, readable lines otherwise. */
function output(flags: Flags, result: Record<string, unknown>, human: string) {
  process.stdout.write(flags.json ? JSON.stringify(result) + '\n' : human + '\n');
}

async function runServer(config: Config, logger: Logger, roles: { api: boolean; worker: boolean }, embedded: boolean, flags: Flags) {
  const stack = await startStack(config, logger, {
    embedded,
    roles,
    ...(config.SVC_WORKFLOW_BUNDLE ? { workflowBundle: config.SVC_WORKFLOW_BUNDLE } : {}),
  });
  logger.info({ ...stack.urls, roles, admin_created: Boolean(stack.adminPassword) }, 'service ready');
  if (!flags.json) {
    const lines = [
      'Workflow automation service is up.',
      stack.urls.api && `  API:              ${stack.urls.api}  (OpenAPI: ${stack.urls.api}/api/openapi.json)`,
      stack.urls.temporalUi && `  Temporal Web UI:  ${stack.urls.temporalUi}`,
      stack.urls.codec && `  Codec (UI):       ${stack.urls.codec}  (127.0.0.1 only, no credentials)`,
      stack.urls.metrics && `  Metrics:          ${stack.urls.metrics}  (Prometheus; loopback clients or SVC_METRICS_TOKEN)`,
      `  Temporal:         ${stack.urls.temporal}`,
      `  PostgreSQL:       ${stack.urls.database}`,
      stack.adminPassword && `  Created user "admin" with password: ${stack.adminPassword}  (shown once)`,
      '  Ctrl-C stops everything.',
    ];
    process.stderr.write(lines.filter(Boolean).join('\n') + '\n');
  }
  await untilStopped(logger, {
    stop: () => stack.stop(),
    atOnce: () => process.exit(130),
    ...(stack.worker ? { stopWhen: { done: stack.worker.done, message: 'the worker stopped unexpectedly; stopping the service' } } : {}),
  });
  logger.info('stopped');
}

function parseCommandLine(argv: string[]) {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      json: { type: 'boolean' },
      login: { type: 'string' },
      role: { type: 'string' },
      password: { type: 'string' },
      email: { type: 'string' },
      name: { type: 'string' },
      out: { type: 'string' },
      key: { type: 'string' },
      status: { type: 'string' },
      'product-slug': { type: 'string' },
      'product-name': { type: 'string' },
      'domain-limit': { type: 'string' },
      'expires-at': { type: 'string' },
      dir: { type: 'string' },
      server: { type: 'string' },
      tag: { type: 'string' },
      q: { type: 'string' },
      prune: { type: 'boolean' },
      plan: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  return { positionals, flags: values as Flags };
}

/** `user create`, `app-password create|revoke`: undefined for a subcommand it does not know. */
function userCommand(command: string, sub: string | undefined, flags: Flags, config: Config, logger: Logger): Promise<void> | undefined {
  if (command === 'user' && sub === 'create') {
    return withDatabase(config, logger, async (orm) => {
      const created = await createCommandServices(orm, config).users.createUser({
        login: required(flags, 'login'),
        role: required(flags, 'role'),
        ...(typeof flags.password === 'string' ? { password: flags.password } : {}),
        ...(typeof flags.email === 'string' ? { email: flags.email } : {}),
      });
      output(flags, { ...created }, `Created ${created.role} ${created.login}${created.password ? ` with password ${created.password}` : ''}`);
    });
  }
  if (command === 'app-password' && sub === 'create') {
    return withDatabase(config, logger, async (orm) => {
      const created = await createCommandServices(orm, config).users.createAppPassword(required(flags, 'login'), required(flags, 'name'));
      output(
        flags,
        { login: created.login, name: created.name, password: created.password },
        `Application password for ${created.login} (${created.name}): ${created.password}\nIt is shown once; store it now.`,
      );
    });
  }
  if (command === 'app-password' && sub === 'revoke') {
    return withDatabase(config, logger, async (orm) => {
      const { users } = createCommandServices(orm, config);
      const user = await users.findByLogin(required(flags, 'login'));
      if (!user) throw new AppError('not_found', `User ${flags.login} not found`);
      await users.revokeAppPassword(user.id, { name: required(flags, 'name') });
      output(flags, { login: user.login, name: flags.name, revoked: true }, `Revoked ${flags.name} of ${user.login}`);
    });
  }
  return undefined;
}

/** `license create|keys|rotate-key|show|revoke`: undefined for a subcommand it does not know. */
async function licenseCommand(sub: string | undefined, positionals: string[], flags: Flags, config: Config, logger: Logger): Promise<boolean> {
  if (sub === 'create') {
    const input = licenseInput(flags);
    await withDatabase(config, logger, async (orm) => {
      const issued = await createCommandServices(orm, config).licenses.create(input);
      output(flags, { ...issued }, `${describeLicense(issued)}\n  token: ${issued.token}\n  It is shown once; store it now.`);
    });
    return true;
  }
  if (sub === 'keys' || sub === 'rotate-key') {
    // The key of the instance the command works on (a running cluster keeps its own).
    await withDatabase(config, logger, async (orm, instance) => {
      const keyRing = await loadKeyRing(instance, !instance.DATABASE_URL);
      const signer = createCommandServices(orm, instance).licenseKeys(keyRing);
      if (sub === 'keys') {
        const keys = await signer.list();
        return output(flags, { keys }, describeKeys(keys));
      }
      const rotated = await signer.rotate();
      const keys = await signer.list();
      output(
        flags,
        { retired: rotated.retired, current: rotated.current, keys },
        `${rotated.retired ? `Retired ${rotated.retired}; ` : ''}signing with ${rotated.current.key_id} now.\n${describeKeys(keys)}`,
      );
    });
    return true;
  }
  if (sub !== 'show' && sub !== 'revoke') return false;
  const key = positionals[2] ?? flags.key;
  if (typeof key !== 'string' || !key) throw new AppError('invalid_request', `license ${sub} needs a token or reference id (or --key)`);
  await withDatabase(config, logger, async (orm) => {
    const { licenses } = createCommandServices(orm, config);
    const license = sub === 'show' ? await licenses.getByKey(key) : await licenses.revoke(key);
    output(flags, { ...license }, describeLicense(license));
  });
  return true;
}

/** The build and provisioning tools: `temporal-cli`, `cluster-binaries`, `bundle-workflows`. */
async function toolCommand(command: string, flags: Flags, config: Config, logger: Logger): Promise<boolean> {
  if (command === 'temporal-cli') {
    const cli = await findTemporalCli(logger, { explicit: config.TEMPORAL_CLI });
    output(flags, { ...cli }, cli.path);
  } else if (command === 'cluster-binaries') {
    const [server, ui] = await Promise.all([provisionGoModule(TEMPORAL_SERVER, logger), provisionGoModule(TEMPORAL_UI, logger)]);
    const paths = { ...server, ...ui };
    output(flags, paths, Object.values(paths).join('\n'));
  } else if (command === 'bundle-workflows') {
    const out = required(flags, 'out');
    const bundle = await bundleWorkflows();
    await writeFile(out, bundle.code);
    output(flags, { out, bytes: bundle.code.length }, `Wrote ${out}`);
  } else return false;
  return true;
}

/** `svc workflows ...`: against a server over HTTP; answers the exit code. */
function workflowsCli(sub: string | undefined, flags: Flags): Promise<number> {
  const text = (name: string) => (typeof flags[name] === 'string' ? (flags[name] as string) : undefined);
  return workflowsCommand(
    sub,
    {
      dir: text('dir'),
      server: text('server'),
      login: text('login'),
      tag: text('tag'),
      q: text('q'),
      plan: text('plan'),
      prune: flags.prune === true,
      json: flags.json === true,
    },
    {
      env: process.env,
      out: (t) => process.stdout.write(t),
      err: (t) => process.stderr.write(t),
      interactive: Boolean(process.stdin.isTTY),
      defaultServer: `http://localhost:${process.env.PORT || 8080}`,
    },
  );
}

async function main(argv: string[]): Promise<number | void> {
  const { positionals, flags } = parseCommandLine(argv);
  const [command, sub] = positionals;
  if (!command || flags.help || command === 'help') {
    process.stdout.write(usage + '\n');
    return;
  }
  loadDotEnv();
  // Against a server over HTTP: the service's own configuration is not read (a variable it would
  // refuse must not turn into exit code 2, which says "the plan has changes").
  if (command === 'workflows') return workflowsCli(sub, flags);
  const config = loadConfig();
  const serverCommand = command === 'start' || command === 'api' || command === 'worker' || command === 'cluster';
  // Server logs go to stdout; one-shot commands keep stdout for their result.
  const logger = createLogger(
    serverCommand ? config.LOG_LEVEL : flags.json ? 'warn' : config.LOG_LEVEL,
    serverCommand ? undefined : (await import('pino')).pino.destination(2),
  );

  switch (command) {
    case 'start': {
      const role = config.SVC_ROLE;
      return runServer(config, logger, { api: role !== 'worker', worker: role !== 'api' }, true, flags);
    }
    case 'api':
      return runServer(config, logger, { api: true, worker: false }, false, flags);
    case 'worker':
      return runServer(config, logger, { api: false, worker: true }, false, flags);
    case 'cluster':
      return runClusterCommand(config, logger, Boolean(flags.json));
    case 'migrate': {
      const applied = await withDatabase(config, logger, async (orm) => migrate(orm));
      return output(flags, { applied }, applied.length ? `Applied: ${applied.join(', ')}` : 'Database is up to date.');
    }
  }
  const handled = userCommand(command, sub, flags, config, logger);
  if (handled) return handled;
  if (command === 'license' && (await licenseCommand(sub, positionals, flags, config, logger))) return;
  if (await toolCommand(command, flags, config, logger)) return;
  throw new AppError('invalid_request', `Unknown command: ${[command, sub].filter(Boolean).join(' ')}\n\n${usage}`);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code ?? 0),
  (err: unknown) => {
    const json = process.argv.includes('--json');
    if (err instanceof ConfigError) {
      process.stderr.write(`Configuration error: ${err.message}\n`);
      if (json) process.stdout.write(JSON.stringify({ status: 'fail', error: 'invalid_config', variable: err.variable, message: err.message }) + '\n');
      process.exit(2);
    }
    if (err instanceof AppError) {
      process.stderr.write(`${err.message}\n`);
      if (json) process.stdout.write(JSON.stringify({ status: 'fail', error: err.code, message: err.message, ...(err.data ? { data: err.data } : {}) }) + '\n');
      process.exit(1);
    }
    const message = err instanceof Error ? err.message : String(err);
    process.stderr.write(`svc: ${message}\n`);
    if (json) process.stdout.write(JSON.stringify({ status: 'fail', error: 'command_failed', message }) + '\n');
    process.exit(1);
  },
);
