import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import type { BeganExecution, GraphNode, NodeError, RunGraphInput, RunNodeInput, RunNodeOutput } from '../workflows/defs.js';
import { ExpressionError, resolveTemplate, type ExpressionContext } from '../src/nodes/expressions.js';
import { nodeTypes, pureNodeTypes } from '../src/nodes/index.js';
import { AppError } from '../src/platform/errors.js';
import { waitOutDatabase } from '../src/db/availability.js';
import type { Services } from '../src/services.js';

interface ExecutionRef {
  id: number;
  workflowId: number;
  ownerId: number;
}

/** Turns anything a node threw into the failure Temporal records (and the retry policy reads). */
function toFailure(err: unknown): Error {
  if (err instanceof ApplicationFailure || err instanceof CancelledFailure) return err;
  if (err instanceof ExpressionError) return ApplicationFailure.nonRetryable(err.message, 'expression_error');
  if (err instanceof AppError) {
    const retryable = err.status >= 500;
    return retryable ? ApplicationFailure.retryable(err.message, err.code) : ApplicationFailure.nonRetryable(err.message, err.code);
  }
  return ApplicationFailure.retryable(err instanceof Error ? err.message : String(err), 'node_failed');
}

const errorOf = (failure: Error): NodeError => ({
  code: failure instanceof ApplicationFailure ? (failure.type ?? 'node_failed') : failure instanceof CancelledFailure ? 'cancelled' : 'node_failed',
  message: failure.message,
});

/**
 * Activities of the graph interpreter. They own the execution mirror in PostgreSQL: each node
 * activity writes its own timeline entry, so the mirror is whole even when a worker dies.
 * Executions are found by the Temporal run id, which also covers runs created by a reset.
 */
export function graphActivities(services: Services) {
  const sql = services.sql;
  const cache = new Map<string, ExecutionRef>();
  const outputLimit = services.config.SVC_NODE_OUTPUT_LIMIT;

  /**
   * The activity's own reads and writes (the execution mirror, the graph, the connection, the
   * owner) wait out a PostgreSQL outage for as long as the activity may run, so a database restart
   * neither fails a node nor runs its side effect again. All of them are idempotent: reads,
   * claims, upserts, updates to a final state.
   */
  function patiently<T>(fn: () => Promise<T>): Promise<T> {
    const activity = Context.current();
    const { startToCloseTimeoutMs, currentAttemptScheduledTimestampMs, isLocal } = activity.info;
    const deadline = (startToCloseTimeoutMs ? currentAttemptScheduledTimestampMs + startToCloseTimeoutMs : Date.now() + 30_000) - 2_000;
    return waitOutDatabase(fn, deadline, isLocal ? undefined : () => activity.heartbeat());
  }
  const mirror = <T = Record<string, unknown>>(text: string, params: unknown[]) => patiently(() => sql.query<T>(text, params));

  async function findExecution(temporalWorkflowId: string, runId: string): Promise<ExecutionRef | undefined> {
    const cached = cache.get(runId);
    if (cached) return cached;
    // One statement finds the run's record, claiming the one the API prepared (start or reset)
    // when Temporal had not yet given it a run id; an exact match wins over an unclaimed one.
    const rows = await mirror<{ id: string; workflow_id: number; owner_id: number }>(
      `with target as (
         select id from executions
          where temporal_workflow_id = ? and (temporal_run_id = ? or temporal_run_id is null)
          order by (temporal_run_id is not null) desc, id desc limit 1 for update skip locked),
       claimed as (
         update executions e set temporal_run_id = ? from target where e.id = target.id returning e.id, e.workflow_id)
       select c.id, c.workflow_id, w.owner_id from claimed c join workflows w on w.id = c.workflow_id`,
      [temporalWorkflowId, runId, runId],
    );
    const row = rows[0];
    if (!row) return undefined;
    const ref = { id: Number(row.id), workflowId: row.workflow_id, ownerId: row.owner_id };
    // Only runs in flight need their record; a small cache keeps the worker's heap flat.
    if (cache.size > 1_000) cache.clear();
    cache.set(runId, ref);
    return ref;
  }

  /** The Temporal run an activity belongs to (always set for workflow activities). */
  const runOf = () => Context.current().info.workflowExecution!;

  async function currentExecution(runId: string): Promise<ExecutionRef> {
    const { workflowId } = runOf();
    const ref = await findExecution(workflowId, runId);
    if (!ref) throw ApplicationFailure.retryable(`No execution record for run ${runId} yet`, 'execution_not_ready');
    return ref;
  }

  async function writeNode(executionId: number, node: Pick<GraphNode, 'id' | 'type'>, entry: Record<string, unknown>) {
    const fields = ['node_type', 'status', 'started_at', 'finished_at', 'duration_ms', 'attempts', 'input', 'output', 'error', 'reused'] as const;
    const values = fields.map((f) => (f === 'node_type' ? node.type : f === 'reused' ? false : entry[f] === undefined ? null : ['input', 'output', 'error'].includes(f) ? JSON.stringify(entry[f]) : entry[f]));
    await mirror(
      `insert into execution_nodes (execution_id, node_id, ${fields.join(', ')}) values (?, ?, ${fields.map(() => '?').join(', ')})
       on conflict (execution_id, node_id) do update set status = excluded.status,
         started_at = coalesce(execution_nodes.started_at, excluded.started_at), finished_at = excluded.finished_at,
         duration_ms = excluded.duration_ms, attempts = greatest(execution_nodes.attempts, excluded.attempts),
         input = coalesce(excluded.input, execution_nodes.input), output = excluded.output, error = excluded.error, reused = false`,
      [executionId, node.id, ...values],
    );
  }

  const control = {
    /** First step of every run: claims or creates the execution record and loads the graph. */
    async beginExecution(input: RunGraphInput, runId: string): Promise<BeganExecution> {
      const { workflowId: temporalWorkflowId } = runOf();
      const definition = await patiently(() => services.workflows.loadVersion(input.workflowId, input.version));
      let ref = await findExecution(temporalWorkflowId, runId);
      if (!ref) {
        // Started by a schedule, a record event or a parent run: nobody prepared a record.
        await mirror(
          `insert into executions (workflow_id, workflow_version, status, trigger, trigger_payload, temporal_workflow_id, temporal_run_id)
           values (?, ?, 'running', ?, ?, ?, ?) on conflict do nothing`,
          [input.workflowId, definition.version, input.trigger, JSON.stringify(input.payload ?? null), temporalWorkflowId, runId],
        );
        ref = await findExecution(temporalWorkflowId, runId);
        if (!ref) throw ApplicationFailure.retryable('execution record not visible yet', 'execution_not_ready');
      }
      return {
        executionId: ref.id,
        version: definition.version,
        graph: definition.graph,
        localPureNodes: services.config.SVC_LOCAL_PURE_NODES,
        pureTypes: pureNodeTypes(),
      };
    },

    async finishExecution(runId: string, result: { status: string; skipped: { id: string; type: string }[]; error?: NodeError & { node_id?: string }; lastOutput?: unknown }) {
      const ref = await currentExecution(runId);
      await mirror(
        `update executions set status = ?, finished_at = coalesce(finished_at, now()), error = ?, last_output = ? where id = ?`,
        [result.status, result.error ? JSON.stringify(result.error) : null, result.lastOutput === undefined ? null : JSON.stringify(result.lastOutput), ref.id],
      );
      for (const node of result.skipped) {
        await mirror(
          `insert into execution_nodes (execution_id, node_id, node_type, status) values (?, ?, ?, 'skipped') on conflict do nothing`,
          [ref.id, node.id, node.type],
        );
      }
    },

    async recordNodeStart(node: GraphNode, runId: string) {
      const ref = await currentExecution(runId);
      await writeNode(ref.id, node, { status: 'running', started_at: new Date(), attempts: 1, input: node.config });
    },

    async recordNodeEnd(node: GraphNode, runId: string, end: { status: 'success' | 'failed'; output?: unknown; error?: NodeError; startedAt: number }) {
      const ref = await currentExecution(runId);
      const finished = new Date();
      await writeNode(ref.id, node, {
        status: end.status,
        started_at: new Date(end.startedAt),
        finished_at: finished,
        duration_ms: finished.getTime() - end.startedAt,
        attempts: 1,
        input: node.config,
        output: end.output,
        error: end.error,
      });
    },

    /** Resolves a run_workflow node's payload and checks the target can run. */
    async prepareChildRun(node: GraphNode, context: RunNodeInput['context'], runId: string) {
      const ref = await currentExecution(runId);
      await writeNode(ref.id, node, { status: 'running', started_at: new Date(), attempts: 1, input: node.config });
      try {
        const config = (await resolveTemplate(node.config, { ...context, execution: { id: ref.id, workflow_id: ref.workflowId } })) as { workflow_id: number; payload?: unknown };
        const target = await patiently(() => services.workflows.loadVersion(Number(config.workflow_id))).catch((err: unknown) => {
          if (err instanceof AppError && err.status === 404) return undefined;
          throw err;
        });
        if (!target || target.status === 'archived') throw ApplicationFailure.nonRetryable(`Workflow ${config.workflow_id} does not exist or is archived`, 'not_found');
        return { workflowId: Number(config.workflow_id), payload: config.payload ?? null };
      } catch (err) {
        const failure = toFailure(err);
        await writeNode(ref.id, node, { status: 'failed', finished_at: new Date(), error: errorOf(failure) });
        throw failure;
      }
    },
  };

  const nodes = {
    /** Runs one node: evaluates its expressions, runs the type's implementation, records the result. */
    async runNode({ node, context }: RunNodeInput): Promise<RunNodeOutput> {
      const activity = Context.current();
      const beat = activity.info.isLocal ? undefined : setInterval(() => activity.heartbeat(), 1000);
      const started = Date.now();
      const attempts = activity.info.attempt;
      let input: unknown;
      let ref: ExecutionRef;
      try {
        ref = await currentExecution(runOf().runId);
        // A local (pure, fast) node is written once, when it ends; others show as running.
        if (!activity.info.isLocal) await writeNode(ref.id, node, { status: 'running', started_at: new Date(started), attempts });
      } catch (err) {
        if (beat) clearInterval(beat);
        throw err;
      }
      try {
        const type = nodeTypes.get(node.type);
        if (!type?.run) throw ApplicationFailure.nonRetryable(`Node type ${node.type} cannot run as an activity`, 'validation_failed');
        const expressionContext: ExpressionContext = { ...context, execution: { id: ref.id, workflow_id: ref.workflowId } };
        input = await resolveTemplate(node.config, expressionContext);
        const parsed = (type.resolvedSchema ?? type.configSchema).safeParse(input);
        if (!parsed.success) {
          const detail = parsed.error.issues.map((i) => `${i.path.join('.') || 'config'}: ${i.message}`).join('; ');
          throw ApplicationFailure.nonRetryable(`Configuration after evaluating expressions is invalid: ${detail}`, 'validation_failed');
        }
        const result = await type.run({
          node,
          config: parsed.data,
          services,
          execution: ref,
          signal: activity.cancellationSignal,
          connection: () => {
            if (node.connection_id === undefined) throw ApplicationFailure.nonRetryable('The node has no connection_id', 'validation_failed');
            const id = node.connection_id;
            return patiently(() => services.connections.resolve(id));
          },
          heartbeat: (details) => activity.heartbeat(details),
          owner: async () => {
            const [user] = await mirror<{ id: number; login: string; role: string }>('select id, login, role from users where id = ?', [ref.ownerId]);
            if (!user) throw ApplicationFailure.nonRetryable('The workflow owner no longer exists', 'forbidden');
            return services.auth.principal(user, 'app_password');
          },
        });
        const size = Buffer.byteLength(JSON.stringify(result.output ?? null));
        if (size > outputLimit) {
          throw ApplicationFailure.nonRetryable(`Node output is ${size} bytes, over the limit of ${outputLimit} (SVC_NODE_OUTPUT_LIMIT)`, 'output_too_large');
        }
        const finished = Date.now();
        await writeNode(ref.id, node, { status: 'success', started_at: new Date(started), finished_at: new Date(finished), duration_ms: finished - started, attempts, input, output: result.output ?? null });
        return result;
      } catch (err) {
        const failure = toFailure(err);
        const finished = Date.now();
        await writeNode(ref.id, node, { status: 'failed', started_at: new Date(started), finished_at: new Date(finished), duration_ms: finished - started, attempts, input, error: errorOf(failure) }).catch(() => undefined);
        throw failure;
      } finally {
        if (beat) clearInterval(beat);
      }
    },
  };

  return { control, nodes };
}
