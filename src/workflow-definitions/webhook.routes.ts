import { z } from 'zod';
import { idempotencyHeaders, idempotencyOf, replayedHeader, replayedHeaders } from '../executions/idempotency.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { safeEqual } from '../platform/crypto.js';
import { AppError, notFound } from '../platform/errors.js';
import { runResult, runResultOf } from './run-result.js';
import type { ExecutionService } from '../executions/execution.service.js';
import type { WorkflowService } from './workflow.service.js';

const LAST_NODE_WAIT_MS = 30_000;

/** The public entry of `webhook` triggers: the workflow's secret in a header or the query. */
export function webhookRoutes({ workflows, executions }: { workflows: WorkflowService; executions: ExecutionService }): AnyRoute[] {
  return [
    defineRoute({
      method: 'post',
      path: '/api/workflow/v1/hooks/{slug}',
      operationId: 'callWebhook',
      summary: 'Starts a run of an active webhook-triggered workflow with the JSON body as payload',
      description:
        'Send the secret as `X-Webhook-Secret` or `?secret=`. Answers 202 with the execution id, or, when the trigger says `respond: "last_node"`, waits up to 30 s and answers 200 with the output of the node that finished last; a run that failed is answered 422 `run_failed`, whose `message` is the run’s error message (a `fail` node’s own) and `data` the execution id, status and error. A run still going after 30 s is answered 202.',
      tag: 'workflows',
      access: 'public',
      params: z.object({ slug: z.string().min(1).max(100) }),
      query: z.strictObject({ secret: z.string().max(200).optional() }),
      body: z.union([z.record(z.string(), z.unknown()), z.array(z.unknown())]),
      bodyOptional: true,
      headers: idempotencyHeaders,
      errors: {
        not_found: 'No active webhook workflow with this slug, or the secret is missing or wrong (the two are not told apart)',
        idempotency_key_reused: 'The Idempotency-Key was used for a different request',
        run_failed: 'With `respond: "last_node"`: the run failed (`message` is its error message; `data.execution_id`, `data.status`, `data.error`)',
      },
      responses: {
        202: { description: 'Run started', data: z.object({ execution_id: z.number().int() }), headers: replayedHeader },
        200: { description: 'Run finished (respond: last_node)', data: runResult, headers: replayedHeader },
      },
      handler: async ({ params, query, body, headers, ctx }) => {
        const workflow = await workflows.hookBySlug(params.slug);
        const secret = ctx.get('x-webhook-secret') || query.secret || '';
        // A wrong secret is answered as an unknown slug: the answer must not tell which slugs are active hooks.
        if (
          !workflow ||
          workflow.status !== 'active' ||
          workflow.trigger.type !== 'webhook' ||
          !workflow.webhook_secret ||
          !safeEqual(secret, workflow.webhook_secret)
        )
          throw notFound('Webhook');
        const started = await executions.start(workflow, { payload: body, trigger: 'webhook' }, undefined, idempotencyOf(headers, 'webhook', body));
        const replayed = replayedHeaders(started.replayed);
        if (workflow.trigger.config.respond === 'last_node') {
          // A repeated Idempotency-Key's run may have ended long ago: its end is not heard again, Temporal answers at once.
          const result = await executions.waitForResult(started.temporalWorkflowId, LAST_NODE_WAIT_MS, started.replayed ? undefined : started.executionId);
          if (result?.status === 'failed') {
            const data = runResultOf(started.executionId, result);
            throw new AppError(
              'run_failed',
              result.error?.message ?? 'The run failed',
              { execution_id: data.execution_id, status: data.status, error: data.error },
              replayed,
            );
          }
          if (result) return { data: runResultOf(started.executionId, result), headers: replayed };
        }
        return { status: 202, data: { execution_id: started.executionId }, headers: replayed };
      },
    }),
  ];
}
