/**
 * Where a webhook run's time goes, at concurrency 1: the peer benchmark's workflow (webhook ->
 * one http_request node -> respond with its answer) run one request at a time on the embedded
 * default, its phases taken from the service's own OpenTelemetry spans (exported to a collector
 * the benchmark runs on loopback) and the run's Temporal history (the server's event times), all
 * on the machine's one clock:
 *
 *  - request and auth: the client's send to the API's server span, and from there to the
 *    execution record's insert (body parsing, the webhook's lookup by slug, the secret's check);
 *  - execution record: the INSERT;
 *  - start: the StartWorkflow call (with eager start, the run's first workflow task comes back
 *    with its answer);
 *  - first workflow task: from the start's answer to the run's first activity (beginExecution,
 *    which claims the record, unless the API prepared the first step) and that step;
 *  - the node: from the first step's end to the node's activity, and the activity (the claim of
 *    the record when it is the first, its connection, the HTTP call, its timeline entry and, as
 *    the run's last node, the run's outcome);
 *  - the finish: from the node's end to finishExecution (when the node did not end the record),
 *    that step, and Temporal's close event;
 *  - the answer: from the record's end to the API's answer (heard from the last node's
 *    announcement, or from Temporal's result when the run's own step ended the record), with
 *    Temporal's close event beside it, and
 *    to the client.
 *
 * Tracing itself costs time (a span per statement, the workflow interceptors of a traced run):
 * the table gives the traced p50 beside an untraced one measured in the same process's absence.
 *
 * Beside it, untraced, the bare SDK's local activity behind the same kind of webhook (bench/bare.ts
 * serving bareHook): the same points from the client, the HTTP target (the moment the node's call
 * arrives, for both) and the run's history, so the table shows where the service's time differs
 * from a durable run with nothing of the service in it.
 * Run: npm run bench -- breakdown   (BENCH_SAMPLES, default 60)
 */
import { createServer } from 'node:http';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import pg from 'pg';
import { createLogger } from '../src/platform/logger.js';
import { benchSetup, oursApi, oursEnv, startBare, startOurs, webhookWorkflow } from './harness.js';
import { cleanups, median, percentile, round, runMain, section } from './lib.js';

const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 60);
const logger = createLogger(process.env.BENCH_LOG_LEVEL ?? 'warn');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Epoch milliseconds with sub-millisecond precision. */
const now = () => performance.timeOrigin + performance.now();

interface SpanRecord {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  start: number;
  end: number;
  attributes: Record<string, unknown>;
}

/** An OTLP/HTTP collector (JSON) on loopback that keeps every span it is sent. */
async function startCollector(): Promise<{ url: string; spans: SpanRecord[]; close(): void }> {
  const spans: SpanRecord[] = [];
  const ms = (nanos: string | number) => Number(BigInt(nanos) / 1000n) / 1000;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as {
          resourceSpans?: { scopeSpans?: { spans?: Record<string, any>[] }[] }[];
        };
        for (const rs of body.resourceSpans ?? [])
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? []) {
              const attributes: Record<string, unknown> = {};
              for (const a of (s.attributes ?? []) as { key: string; value: Record<string, unknown> }[]) attributes[a.key] = Object.values(a.value)[0];
              spans.push({
                traceId: s.traceId,
                spanId: s.spanId,
                ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
                name: s.name,
                start: ms(s.startTimeUnixNano),
                end: ms(s.endTimeUnixNano),
                attributes,
              });
            }
      } catch {
        // not JSON: ignored
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, spans, close: () => server.close() };
}

interface Sample {
  sent: number;
  received: number;
  /** When the HTTP target received the node's call. */
  arrival: number;
  requestId: string;
  executionId: number;
}

/** One request to the bare SDK's webhook: its times and its run's workflow id. */
interface BareSample {
  sent: number;
  received: number;
  arrival: number;
  workflowId: string;
}

/**
 * The HTTP target the node calls, as the benchmark's own (a small JSON answer to every request),
 * keeping the time each request arrived.
 */
async function startRecordingTarget(): Promise<{ url: string; arrivals: number[]; close(): void }> {
  const arrivals: number[] = [];
  const server = createServer((_req, res) => {
    arrivals.push(now());
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, arrivals, close: () => server.close() };
}

/** The phases of one request, ms, or undefined when a span is missing. */
type Phases = Record<string, number>;

const eventMs = (t: { seconds?: unknown; nanos?: number | null } | null | undefined) => Number(t?.seconds ?? 0) * 1000 + (t?.nanos ?? 0) / 1e6;

async function main() {
  const cleanup = cleanups();
  try {
    await bench(cleanup);
  } finally {
    await cleanup.run();
  }
}

async function bench(cleanup: ReturnType<typeof cleanups>) {
  const { env, dir, settings: setup } = await benchSetup('breakdown', logger, cleanup);
  const target = await startRecordingTarget();
  cleanup.add(() => target.close());
  const settings = { ...setup, targetUrl: target.url };
  const collector = await startCollector();
  cleanup.add(() => collector.close());
  const connection = await Connection.connect({ address: env.temporalAddress });
  cleanup.add(() => connection.close());
  const temporal = new Client({ connection });
  const load = [loadavg()[0]!];

  const db = new pg.Client({ connectionString: env.databaseUrl });
  await db.connect();
  cleanup.add(() => db.end());
  const { EventType } = proto.temporal.api.enums.v1;
  /**
   * The points each request passed, in order, from the client, the HTTP target, PostgreSQL and the
   * history; one table row per point: the time since the point before it (median and p90 over the
   * requests).
   */
  const timelineOf = async <S extends { sent: number; received: number; arrival: number }>(
    list: S[],
    workflowIdOf: (sample: S) => string,
    pointsOf: (sample: S) => Promise<[string, number][]>,
  ): Promise<string[]> => {
    const rowsOf: Map<string, number[]> = new Map();
    const order: Map<string, number[]> = new Map();
    for (const sample of list) {
      const points: [string, number][] = [
        ['client sends the request', sample.sent],
        ["the HTTP target receives the node's call", sample.arrival],
        ['client receives the answer', sample.received],
        ...(await pointsOf(sample)),
      ];
      const history = await temporal.workflow.getHandle(workflowIdOf(sample)).fetchHistory();
      let task = 0;
      for (const e of history.events ?? []) {
        const type = EventType[e.eventType ?? 0]?.replace(/^EVENT_TYPE_/, '') ?? String(e.eventType);
        if (type === 'WORKFLOW_TASK_SCHEDULED') task++;
        const named: Record<string, string> = {
          WORKFLOW_EXECUTION_STARTED: 'Temporal: run started',
          WORKFLOW_TASK_STARTED: `Temporal: workflow task ${task} started`,
          WORKFLOW_TASK_COMPLETED: `Temporal: workflow task ${task} completed`,
          ACTIVITY_TASK_STARTED: 'Temporal: node activity started',
          ACTIVITY_TASK_COMPLETED: 'Temporal: node activity completed',
          WORKFLOW_EXECUTION_COMPLETED: 'Temporal: run closed',
        };
        if (named[type]) points.push([named[type]!, eventMs(e.eventTime)]);
      }
      points.sort((a, b) => a[1] - b[1]);
      points.forEach(([name, at], i) => {
        rowsOf.set(name, [...(rowsOf.get(name) ?? []), i === 0 ? 0 : at - points[i - 1]![1]]);
        order.set(name, [...(order.get(name) ?? []), i]);
      });
    }
    return [...rowsOf.keys()]
      .sort((a, b) => median(order.get(a)!) - median(order.get(b)!))
      .map((name) => `| ${name} | ${round(median(rowsOf.get(name)!))} | ${round(percentile(rowsOf.get(name)!, 90))} |`);
  };
  /** The service's own points of a request: its execution record's and timeline entry's times in PostgreSQL. */
  const timesOf = async (from: 'executions where id' | 'execution_nodes where execution_id', executionId: number) => {
    const { rows } = await db.query<{ started: number; finished: number }>(
      `select extract(epoch from started_at) * 1000 as started, extract(epoch from finished_at) * 1000 as finished from ${from} = $1`,
      [executionId],
    );
    return rows[0];
  };
  const recordPoints = async (sample: Sample): Promise<[string, number][]> => {
    const record = await timesOf('executions where id', sample.executionId);
    const entry = await timesOf('execution_nodes where execution_id', sample.executionId);
    return [
      ['execution record inserted (PostgreSQL now())', Number(record!.started)],
      ['node: entry started (activity)', Number(entry!.started)],
      ['node: entry finished (activity)', Number(entry!.finished)],
      ['execution record finished (finish transaction began)', Number(record!.finished)],
    ];
  };
  /** The target's first arrival since `from`: the node's call of the request sent then. */
  const arrivalSince = (from: number) => target.arrivals.find((t) => t >= from) ?? NaN;

  /** `n` sequential webhook calls to a service process: each one's times, ids and latency. */
  const calls = async (api: string, hook: { path: string; secret: string }, n: number): Promise<Sample[]> => {
    const out: Sample[] = [];
    for (let i = 0; i < n; i++) {
      target.arrivals.length = 0;
      const sent = now();
      const res = await fetch(`${api}${hook.path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-webhook-secret': hook.secret },
        body: JSON.stringify({ i }),
      });
      const body = (await res.json()) as { data: { execution_id: number; output?: { body?: { ok?: boolean } } } };
      const received = now();
      if (res.status !== 200 || body.data.output?.body?.ok !== true) throw new Error(`webhook answered ${res.status}: ${JSON.stringify(body)}`);
      out.push({ sent, received, arrival: arrivalSince(sent), requestId: res.headers.get('x-request-id')!, executionId: body.data.execution_id });
    }
    return out;
  };

  // Untraced first: the same process as `npm start` runs it, for the latency tracing does not add.
  const plain = await startOurs(await oursEnv({ ...settings, queue: 'bench-plain', localPureNodes: true }), join(dir, 'plain.log'));
  // Stopped here once measured, and by the cleanup if a request fails first (a second stop does nothing).
  cleanup.add(() => plain.stop());
  const plainHook = await webhookWorkflow(oursApi(plain).call, target.url);
  await calls(plain.api, plainHook, 10);
  const plainSamples = await calls(plain.api, plainHook, SAMPLES);
  const untraced = plainSamples.map((s) => s.received - s.sent);
  await plain.stop();
  const timeline = await timelineOf(plainSamples, (s) => `bench-plain-execution-${s.executionId}`, recordPoints);

  // The bare SDK's local activity behind a webhook, one request at a time as ours.
  const bare = await startBare(env.temporalAddress, 'bench-bare');
  cleanup.add(() => bare.stop());
  const served = await bare.run({ type: 'bareHook', args: [`${target.url}/`, true], total: 0, concurrency: 0, serve: true });
  const bareCalls = async (n: number): Promise<BareSample[]> => {
    const out: BareSample[] = [];
    for (let i = 0; i < n; i++) {
      target.arrivals.length = 0;
      const sent = now();
      const res = await fetch(served.url!, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ i }) });
      const body = (await res.json()) as { ok?: boolean };
      const received = now();
      if (res.status !== 200 || body.ok !== true) throw new Error(`the bare webhook answered ${res.status}: ${JSON.stringify(body)}`);
      out.push({ sent, received, arrival: arrivalSince(sent), workflowId: res.headers.get('x-workflow-id')! });
    }
    return out;
  };
  await bareCalls(10);
  const bareSamples = await bareCalls(SAMPLES);
  await bare.stop();
  const bareTimeline = await timelineOf(
    bareSamples,
    (s) => s.workflowId,
    () => Promise.resolve([]),
  );
  const bareLatency = bareSamples.map((s) => s.received - s.sent);

  const ours = await startOurs(
    { ...(await oursEnv({ ...settings, queue: 'bench-traced', localPureNodes: true })), OTEL_EXPORTER_OTLP_ENDPOINT: collector.url },
    join(dir, 'traced.log'),
  );
  cleanup.add(() => ours.stop());
  const hook = await webhookWorkflow(oursApi(ours).call, target.url);
  await calls(ours.api, hook, 10);
  const samples = await calls(ours.api, hook, SAMPLES);
  load.push(loadavg()[0]!);
  // The batch span processors export every second.
  await sleep(3000);

  const byTrace = new Map<string, SpanRecord[]>();
  for (const s of collector.spans) byTrace.set(s.traceId, [...(byTrace.get(s.traceId) ?? []), s]);
  const phases: Phases[] = [];
  const unmatched: string[] = [];
  for (const sample of samples) {
    const server = collector.spans.find((s) => s.attributes['svc.request_id'] === sample.requestId);
    const spans = server ? (byTrace.get(server.traceId) ?? []) : [];
    const first = (name: string | RegExp, after = 0) =>
      spans.filter((s) => (typeof name === 'string' ? s.name === name : name.test(s.name)) && s.start >= after).sort((a, b) => a.start - b.start)[0];
    const insert = spans.find((s) => s.name === 'SQL INSERT' && String(s.attributes['db.statement']).includes('into executions'));
    const lookup = spans.find((s) => s.name === 'SQL SELECT' && String(s.attributes['db.statement']).includes('from workflows'));
    const start = first(/^StartWorkflow:/);
    const begin = first('RunActivity:beginExecution');
    const node = first('RunActivity:runNode');
    const finish = first('RunActivity:finishExecution');
    const http = first(/^HTTP /);
    const history = await temporal.workflow.getHandle(`bench-traced-execution-${sample.executionId}`).fetchHistory();
    const closed = (history.events ?? []).find((e) => e.workflowExecutionCompletedEventAttributes);
    if (!server || !insert || !start || !node || !closed) {
      unmatched.push(
        `${sample.requestId}: ${[!server && 'server', !insert && 'insert', !start && 'start', !node && 'node', !closed && 'close'].filter(Boolean).join(', ')}`,
      );
      continue;
    }
    const nodeSql = spans.filter((s) => s.name.startsWith('SQL') && s.start >= node.start && s.end <= node.end);
    const closedAt = eventMs(closed.eventTime);
    const tasks = (history.events ?? []).filter((e) => e.workflowTaskCompletedEventAttributes).length;
    phases.push({
      'client -> API': server.start - sample.sent,
      'request and auth (body, webhook lookup, secret)': insert.start - server.start,
      '  of which: the webhook lookup (SQL)': lookup ? lookup.end - lookup.start : NaN,
      'execution record (INSERT)': insert.end - insert.start,
      'start (StartWorkflow, eager)': start.end - insert.end,
      // Runs whose first step the API prepared have no beginExecution; a run whose last node ends its record, no finishExecution.
      'first workflow task: to the first activity': (begin ?? node).start - start.end,
      'first step (beginExecution: claim, definition)': begin ? begin.end - begin.start : 0,
      'to the node': begin ? node.start - begin.end : 0,
      'the node (runNode)': node.end - node.start,
      '  of which: the HTTP call': http ? http.end - http.start : NaN,
      '  of which: SQL (claim, attempt, connection, entry and outcome)': nodeSql.reduce((a, s) => a + (s.end - s.start), 0),
      'to the finish': finish ? finish.start - node.end : 0,
      'finish (finishExecution)': finish ? finish.end - finish.start : 0,
      // The API answers from the record its last node ended once it hears so, before or after Temporal's close event.
      'the answer: the record ended -> API answers': server.end - (finish ?? node).end,
      '  beside it: the record ended -> the close event': closedAt - (finish ?? node).end,
      'API -> client': sample.received - server.end,
      total: sample.received - sample.sent,
      'workflow tasks': tasks,
      'history events': (history.events ?? []).length,
    });
  }
  if (!phases.length) throw new Error(`no request could be traced: ${unmatched.slice(0, 3).join('; ')}`);
  const names = Object.keys(phases[0]!);
  const lines = [
    `Untraced, from timestamps (the client's clock, the execution record's and timeline entry's times in PostgreSQL, the run's Temporal history): ${SAMPLES} requests one after the other, p50 ${round(median(untraced))} ms (p99 ${round(percentile(untraced, 99))}). Each row is the time from the point before it to this point, median and p90 over the requests:`,
    '',
    '| point reached | from the previous point, p50 ms | p90 ms |',
    '|---|---|---|',
    ...timeline,
    '',
    `The bare SDK's local activity behind a webhook (bench/bare.ts serving bareHook: the run started eagerly, one local activity making the same GET, the answer its result), untraced, ${SAMPLES} requests one after the other: p50 ${round(median(bareLatency))} ms (p99 ${round(percentile(bareLatency, 99))}). The same points where it has them:`,
    '',
    '| point reached | from the previous point, p50 ms | p90 ms |',
    '|---|---|---|',
    ...bareTimeline,
    '',
    'Traced (OTLP spans to a collector on loopback; tracing itself adds a span per SQL statement and the workflow interceptors, so the phases are longer than untraced):',
    '',
    `${SAMPLES} requests one after the other (${phases.length} traced${unmatched.length ? `, ${unmatched.length} not: ${unmatched.slice(0, 2).join('; ')}` : ''}); load average ${load.map((l) => round(l)).join(' -> ')}.`,
    `Untraced p50 ${round(median(untraced))} ms (p99 ${round(percentile(untraced, 99))}); traced p50 ${round(median(phases.map((p) => p.total!)))} ms.`,
    '',
    '| phase | p50 ms | p90 ms | mean ms |',
    '|---|---|---|---|',
    ...names.map((n) => {
      const v = phases.map((p) => p[n]!).filter((x) => Number.isFinite(x));
      return `| ${n} | ${round(median(v))} | ${round(percentile(v, 90))} | ${round(v.reduce((a, b) => a + b, 0) / v.length)} |`;
    }),
  ].join('\n');
  section('breakdown', lines);
  process.stdout.write(`\n${lines}\n`);
}

runMain(main);
