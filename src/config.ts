import { z } from 'zod';
import { parseEgressAllow } from './platform/egress.js';

/** Raised when an environment variable holds a value the service cannot use. */
export class ConfigError extends Error {
  constructor(
    public readonly variable: string,
    detail: string,
  ) {
    super(`${variable}: ${detail}`);
    this.name = 'ConfigError';
  }
}

const bool = z.enum(['true', 'false', '1', '0', 'yes', 'no']).transform((v) => v === 'true' || v === '1' || v === 'yes');
/** Longest wait a gated action may have (Temporal timers can be longer; a year is plenty). */
export const MAX_GATE_TTL_SECONDS = 365 * 24 * 3600;
/** A duration in seconds: a plain number of seconds, or a number with `s`, `m`, `h` or `d`. */
const durationSeconds = z
  .string()
  .regex(/^\d+(s|m|h|d)?$/i, 'expected a duration such as 900, 90s, 15m, 24h or 7d')
  .transform((v) => {
    const m = /^(\d+)(s|m|h|d)?$/i.exec(v)!;
    return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86400 }[(m[2] ?? 's').toLowerCase() as 's']!;
  })
  .pipe(z.number().int().min(1, 'must be at least one second').max(MAX_GATE_TTL_SECONDS, 'must be at most 365 days'));
const port = z.coerce.number().int().min(0).max(65535);
const byteSize = z
  .string()
  .regex(/^\d+(b|kb|mb)?$/i, 'expected a size such as 512kb or 1mb')
  .transform((v) => {
    const m = /^(\d+)(b|kb|mb)?$/i.exec(v)!;
    const unit = (m[2] ?? 'b').toLowerCase();
    return Number(m[1]) * (unit === 'mb' ? 1024 * 1024 : unit === 'kb' ? 1024 : 1);
  });

/**
 * Every variable the service reads. Each field is documented where it is declared; the table in
 * docs/configuration.md mirrors this list.
 */
/** USD per 1,000 tokens, in and out, per model id: the shape of SVC_AGENT_PRICES. */
const priceTableSchema = z.record(z.string(), z.strictObject({ in: z.number().min(0), out: z.number().min(0) }));

const schema = z.object({
  /** HTTP port of the API. */
  PORT: port.default(8080),
  /** Interface the API listens on. */
  HOST: z.string().min(1).default('0.0.0.0'),
  /** Which parts this process runs: the API, the Temporal worker, or both. */
  SVC_ROLE: z.enum(['all', 'api', 'worker']).default('all'),
  /** Directory for embedded PostgreSQL, the Temporal dev server database and the generated key. */
  SVC_DATA_DIR: z.string().min(1).default('.data'),
  /** PostgreSQL connection string. When unset, `start` runs an embedded PostgreSQL. */
  DATABASE_URL: z.string().url().optional(),
  /** Port of the embedded PostgreSQL (only when DATABASE_URL is unset). */
  SVC_EMBEDDED_PG_PORT: port.default(5488),
  /** Temporal frontend address host:port. When unset, `start` runs the Temporal CLI dev server. */
  TEMPORAL_ADDRESS: z
    .string()
    .regex(/^[^\s:]+:\d+$/, 'expected host:port')
    .optional(),
  /** Temporal namespace. */
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  /** Task queue shared by the API (client) and the worker. */
  TEMPORAL_TASK_QUEUE: z.string().min(1).default('workflow-svc'),
  /**
   * Prefix of every Temporal workflow and schedule id this deployment creates, so several
   * deployments (or test runs) can share one Temporal namespace without their ids colliding.
   */
  SVC_INSTANCE_ID: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,39}$/, 'lower-case letters, digits and -')
    .default('svc'),
  /** Port of the embedded Temporal dev server (only when TEMPORAL_ADDRESS is unset). */
  TEMPORAL_PORT: port.default(7233),
  /** Port of the embedded Temporal Web UI. */
  TEMPORAL_UI_PORT: port.default(8233),
  /**
   * Port of the codec listener the embedded Temporal Web UI decodes payloads through (only when
   * `start` runs the Temporal dev server). It binds 127.0.0.1 whatever HOST says, and asks for no
   * credentials: every process on this machine may decode. `off` disables it; the UI then calls
   * the API's authenticated /api/temporal-codec (see docs/operators.md).
   */
  SVC_CODEC_PORT: z.union([z.literal('off'), port], { error: 'expected a port number or off (the listener always binds 127.0.0.1)' }).default(8234),
  /** Base URL of the Temporal Web UI, used for links in execution views. */
  TEMPORAL_UI_URL: z.string().url().optional(),
  /** Path of a `temporal` CLI binary to use instead of searching PATH and the cache. */
  TEMPORAL_CLI: z.string().min(1).optional(),
  /**
   * Master key (32 bytes, base64 or hex). Credentials are encrypted and cookies signed under keys
   * derived from it. When unset, the embedded default generates one into SVC_DATA_DIR.
   */
  SVC_ENCRYPTION_KEY: z.string().optional(),
  /**
   * Earlier master keys, comma-separated, still accepted for decryption after a rotation: values
   * carry the id of the key that sealed them. New values always use SVC_ENCRYPTION_KEY.
   */
  SVC_PREVIOUS_ENCRYPTION_KEYS: z.string().optional(),
  /** Password of the `admin` user created on first start. Generated and printed once when unset. */
  SVC_ADMIN_PASSWORD: z.string().min(8, 'must be at least 8 characters').optional(),
  /** Becomes an application password of `admin` on first start, so scripts can log in at once. */
  SVC_ADMIN_APP_PASSWORD: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Capability that `svc_agent_use` maps to. */
  SVC_AGENT_CAPABILITY: z
    .string()
    .regex(/^[a-z_]+$/)
    .default('edit_posts'),
  /** Model calls allowed in one agent turn; the turn then ends with a message saying so. */
  SVC_AGENT_MAX_MODEL_CALLS: z.coerce.number().int().min(1).max(100).default(10),
  /**
   * Tool calls one model answer may carry: an answer with more ends its turn with 502
   * `tool_call_limit` before any of them runs (each call costs a worker's time and a history step).
   */
  SVC_AGENT_MAX_TOOL_CALLS: z.coerce.number().int().min(1).max(1000).default(20),
  /**
   * How long a pending action of the agent's gate waits for a decision before it expires (a
   * durable timer in the session workflow); a session may set its own `gate_ttl_s` at creation.
   */
  SVC_AGENT_GATE_TTL: durationSeconds.default(24 * 3600),
  /** Messages and decisions a session workflow handles before it continues as new (bounds its history). */
  SVC_AGENT_UPDATES_PER_RUN: z.coerce.number().int().min(1).max(10_000).default(200),
  /**
   * Agent sessions one user may open per hour (each is a Temporal workflow that stays open);
   * more are refused with 429 and Retry-After.
   */
  SVC_AGENT_MAX_SESSIONS_PER_HOUR: z.coerce.number().int().min(1).max(100_000).default(100),
  /** Streamed turns (`stream: true`) one user may hold open at once on one API process; more get 429. */
  SVC_AGENT_MAX_STREAMS_PER_USER: z.coerce.number().int().min(1).max(1000).default(5),
  /** Largest agent message content (bytes of UTF-8); a larger one is refused with 413. */
  SVC_AGENT_MAX_MESSAGE_BYTES: byteSize.default(32 * 1024),
  /** How long one model call may take (non-streaming answer, or the whole stream). */
  SVC_AGENT_PROVIDER_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(120_000),
  /**
   * Price table for agent telemetry, JSON `{"<model id>": {"in": usd_per_1k, "out": usd_per_1k}}`.
   * Models missing from it cost 0, and the session metadata says the price is unknown.
   */
  SVC_AGENT_PRICES: z
    .string()
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: 'custom', message: 'expected JSON such as {"gpt-4o": {"in": 0.0025, "out": 0.01}}' });
        return z.NEVER;
      }
    })
    .pipe(priceTableSchema)
    .default({}),
  /**
   * The address people reach the API at, for the links the service hands out (a webhook's `url`,
   * the links an approval hands its approvers on the page, in `approve_url` and in notifications),
   * e.g. `https://automations.example.com`. Unset: the address of the request (in API answers) or
   * the one the API of this process listens on (in notifications; a worker on its own then uses
   * `http://localhost:<PORT>`).
   */
  SVC_PUBLIC_URL: z.url({ protocol: /^https?$/, error: 'an http(s) URL' }).optional(),
  /** Largest accepted request body. */
  SVC_BODY_LIMIT: byteSize.default(1024 * 1024),
  /** Lifetime of a browser session cookie, in hours. */
  SVC_SESSION_TTL_HOURS: z.coerce
    .number()
    .positive()
    .max(24 * 365)
    .default(48),
  /** Lifetime of an X-Svc-Nonce value, in hours. */
  SVC_NONCE_TTL_HOURS: z.coerce
    .number()
    .positive()
    .max(24 * 30)
    .default(12),
  /** Mark the session cookie Secure (set behind HTTPS). */
  SVC_COOKIE_SECURE: bool.default(false),
  /** Failed logins allowed per login name and client address in a 15-minute window. */
  SVC_LOGIN_MAX_FAILURES: z.coerce.number().int().min(1).default(10),
  /**
   * Failed logins allowed per client address in a 15-minute window, whatever login names they
   * try: guesses spread over many (or unknown) names cannot buy unlimited password hashing.
   */
  SVC_LOGIN_MAX_FAILURES_PER_ADDRESS: z.coerce.number().int().min(1).default(100),
  /** Requests per minute per client address over the licence endpoints (activate, verify, deactivate). */
  SVC_LICENSE_RATE_LIMIT: z.coerce.number().int().min(1).default(60),
  /**
   * Lifetime of the signature on activate and verify answers, in days: a client trusts a cached
   * answer offline for at most this long (its own grace period may be shorter), and a retired
   * signing key stays listed this long after a rotation.
   */
  SVC_LICENSE_SIGNATURE_TTL_DAYS: z.coerce.number().positive().max(365).default(30),
  /** Attempts of one licence webhook delivery before it is recorded as failed. */
  SVC_LICENSE_WEBHOOK_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(50).default(12),
  /** Wait before the second attempt of a licence webhook delivery; each further wait doubles, up to 6 hours. */
  SVC_LICENSE_WEBHOOK_RETRY_MS: z.coerce.number().int().min(10).max(3_600_000).default(30_000),
  /** How long one licence webhook request may take before the attempt counts as failed. */
  SVC_LICENSE_WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(10_000),
  /** Take the client address from X-Forwarded-For (only behind a trusted proxy). */
  TRUST_PROXY: bool.default(false),
  /** Prebuilt workflow bundle (`svc bundle-workflows --out FILE`); without it workers bundle at start. */
  SVC_WORKFLOW_BUNDLE: z.string().min(1).optional(),
  /** Largest output a workflow node may produce; a larger one fails the node with `output_too_large`. */
  SVC_NODE_OUTPUT_LIMIT: byteSize.default(512 * 1024),
  /**
   * A node output or trigger payload larger than this stays out of Temporal's history: it is kept
   * in the execution's timeline and passed by reference. With the two below it bounds what one
   * workflow task carries (at most 32 x (32 KiB + 32 KiB) = 2 MiB, under gRPC's 4 MiB), whatever
   * the payload and the outputs.
   */
  SVC_HISTORY_INLINE_BYTES: byteSize
    .pipe(
      z
        .number()
        .min(1024)
        .max(32 * 1024),
    )
    .default(16 * 1024),
  /** Inline context one node is given at most (the outputs it reads and the payload); the rest by reference. */
  SVC_NODE_CONTEXT_INLINE_BYTES: byteSize
    .pipe(
      z
        .number()
        .min(1024)
        .max(32 * 1024),
    )
    .default(32 * 1024),
  /** Nodes of one run in flight at once; more ready nodes wait their turn (a loop over items has its own concurrency). */
  SVC_RUN_MAX_PARALLEL_NODES: z.coerce.number().int().min(1).max(32).default(32),
  /**
   * How long an Idempotency-Key of run, replay or webhook is remembered, in hours (at least 24):
   * a retried call with the same key within it returns the first call's execution.
   */
  SVC_IDEMPOTENCY_TTL_HOURS: z.coerce
    .number()
    .min(24)
    .max(24 * 30)
    .default(24),
  /**
   * How long one node's expressions may take. They are evaluated on worker threads: past this,
   * the thread is terminated and the node fails with `expression_limit`.
   */
  SVC_EXPRESSION_TIMEOUT_MS: z.coerce.number().int().min(10).max(60_000).default(1000),
  /**
   * Expressions one user may try per minute with POST /expressions/evaluate: each holds a thread
   * of the sandbox runs use for up to SVC_EXPRESSION_TIMEOUT_MS.
   */
  SVC_EXPRESSION_EVALUATIONS_PER_MINUTE: z.coerce.number().int().min(1).max(100_000).default(120),
  /** Heap of one expression thread, in MiB; an expression that needs more fails with `expression_limit`. */
  SVC_EXPRESSION_MEMORY_MB: z.coerce.number().int().min(16).max(4096).default(128),
  /** Worker threads evaluating expressions at once (per worker process). */
  SVC_EXPRESSION_THREADS: z.coerce.number().int().min(1).max(64).default(2),
  /**
   * How deep run_workflow children may nest under a run: a node that would start a child one
   * level deeper fails with `child_run_limit`. (Child runs' Temporal workflow ids grow with each
   * level, hence the cap of 12.)
   */
  SVC_RUN_WORKFLOW_MAX_DEPTH: z.coerce.number().int().min(1).max(12).default(10),
  /** Child runs one run may start in all, its children's children included; more fail with `child_run_limit`. */
  SVC_RUN_WORKFLOW_MAX_CHILD_RUNS: z.coerce.number().int().min(1).max(100_000).default(100),
  /** Items one for_each list may hold; a longer list fails the node with `too_many_items` before any item runs. */
  SVC_FOR_EACH_MAX_ITEMS: z.coerce.number().int().min(1).max(1_000_000).default(10_000),
  /**
   * Items the loops of one run may list in all, nested loops included (a loop inside a loop lists
   * its items once per outer item); a list that would pass it fails its node with `too_many_items`.
   */
  SVC_FOR_EACH_MAX_RUN_ITEMS: z.coerce.number().int().min(1).max(10_000_000).default(100_000),
  /**
   * History events a loop's items workflow lets a run of it reach before it continues as new
   * (it stops starting items in time for the ones in flight to end under it). Temporal warns at
   * 10,240 events a run; Temporal's own suggestion to continue as new comes first when earlier.
   */
  SVC_FOR_EACH_HISTORY_EVENTS: z.coerce.number().int().min(500).max(10_000).default(8_000),
  /**
   * Runs started by schedules that may be in progress at once for one user (the owner of their
   * workflows, all schedules together): a run a schedule starts beyond it ends at once as
   * `failed` with `schedule_run_limit`, whatever the schedule's overlap policy.
   */
  SVC_SCHEDULE_MAX_RUNNING_PER_USER: z.coerce.number().int().min(1).max(100_000).default(10),
  /** Run pure nodes (transform, condition, switch, fail) as Temporal local activities. */
  SVC_LOCAL_PURE_NODES: bool.default(true),
  /**
   * An `http_request` node whose `timeout_ms` (30000 when not set) is at most this runs as a
   * Temporal local activity, inside the run's workflow task (no dispatch through the server); one
   * with a longer timeout as a regular activity that heartbeats. 0: every one as a regular activity.
   */
  SVC_LOCAL_CALL_MAX_MS: z.coerce.number().int().min(0).max(600_000).default(30_000),
  /**
   * When the API and the worker share a process (`SVC_ROLE=all`, untraced), a new run whose graph
   * starts with one such short call has that call's first attempt made by the API as soon as
   * Temporal has started the run, while the worker activates it; the node's local activity then
   * answers that attempt's outcome. The call is made a few milliseconds sooner (docs/workflows.md
   * says the one case where it is then made once more than before).
   */
  SVC_FIRST_CALL_AHEAD: bool.default(true),
  /**
   * What outbound calls made for users (nodes, connection probes, model providers, licence vendor
   * webhooks) may reach although it is loopback, link-local, private, unique-local, multicast or
   * otherwise reserved: comma-separated host names, `*.` wildcards, IP addresses and CIDR ranges,
   * each optionally with `:port` (IPv6 in brackets then), e.g.
   * `api.internal,*.corp.example,10.1.0.0/16:443,127.0.0.1:11435,[fd00::/8]:443`. Everything else of
   * that kind is refused (`egress_denied`); public addresses need no entry.
   */
  SVC_EGRESS_ALLOW: z
    .string()
    .optional()
    .superRefine((text, ctx) => {
      try {
        parseEgressAllow(text);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
      }
    }),
  /** Redirects an outbound call made for a user follows before it fails (each hop is checked again). */
  SVC_EGRESS_MAX_REDIRECTS: z.coerce.number().int().min(0).max(20).default(5),
  /**
   * The most bytes of an answer's body an outbound call made for a user reads (an `http_request`
   * node's target, a model's answer, streamed or not, a probe): reading stops there and the call
   * fails with `response_too_large`, so a huge or endless answer costs at most this much memory.
   */
  SVC_EGRESS_RESPONSE_LIMIT: byteSize
    .pipe(
      z
        .number()
        .int()
        .min(1024, 'must be at least 1kb')
        .max(1024 * 1024 * 1024, 'must be at most 1024mb'),
    )
    .default(10 * 1024 * 1024),
  /** How long a connection test waits for the target. */
  SVC_PROBE_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(5000),
  /**
   * Who may read the Prometheus metrics (`GET /metrics` on the API, the worker's metrics port):
   * unset, only clients connecting from a loopback address; set, also anyone sending
   * `Authorization: Bearer <this token>` (a scraper on another machine).
   */
  SVC_METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  /** Port of a worker-only process's metrics listener (`/metrics`); `off` serves none. */
  SVC_METRICS_PORT: z.union([z.literal('off'), port], { error: 'expected a port number or off' }).default(9464),
  /** Interface the worker's metrics listener binds. */
  SVC_METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  /**
   * Base address of an OpenTelemetry collector (OTLP over HTTP, e.g. `http://collector:4318`);
   * traces go to its `/v1/traces`. Unset, nothing is traced.
   */
  OTEL_EXPORTER_OTLP_ENDPOINT: z.url({ protocol: /^https?$/, error: 'an http(s) URL' }).optional(),
  /** `service.name` of the exported spans. */
  OTEL_SERVICE_NAME: z.string().min(1).max(100).default('workflow-svc'),
  /** pino log level. */
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.infer<typeof schema>;
export const configVariables = Object.keys(schema.shape);

/**
 * Reads the configuration from `env`. Throws a ConfigError naming the first bad variable;
 * the entry point turns it into one line and a non-zero exit.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const input: Record<string, string> = {};
  for (const key of configVariables) {
    const value = env[key];
    if (value !== undefined && value !== '') input[key] = value;
  }
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const variable = String(issue.path[0] ?? 'environment');
    throw new ConfigError(variable, `${issue.message} (got ${JSON.stringify(input[variable] ?? '')})`);
  }
  return parsed.data;
}

/** Loads `.env` from the working directory when present; real environment variables win. */
export function loadDotEnv(path = '.env'): void {
  try {
    process.loadEnvFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}
