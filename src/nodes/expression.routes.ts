import { z } from 'zod';
import type { Config } from '../config.js';
import { named } from '../http/openapi.js';
import { defineRoute, type AnyRoute } from '../http/route.js';
import { AppError, rateLimited } from '../platform/errors.js';
import type { RateLimiter } from '../platform/rate-limit.js';
import { ExpressionLimitError, type ExpressionSandbox } from './expression-sandbox.js';
import { ExpressionError, templateProblems, type ExpressionContext } from './expressions.js';

const evaluateBody = z.strictObject({
  expression: z
    .string()
    .min(1)
    .max(20_000)
    .describe('A template as node configurations hold them (text with `{{ }}`; one whole `{{ }}` yields the raw value), or one bare JSONata expression'),
  context: z
    .strictObject({
      trigger: z.unknown().optional().describe('The trigger payload (`trigger`)'),
      nodes: z.record(z.string(), z.unknown()).optional().describe('Node outputs by node id (`nodes.<id>`)'),
      execution: z.strictObject({ id: z.number().int(), workflow_id: z.number().int() }).optional(),
    })
    .default({})
    .describe('What the expression sees, as a run gives it; missing parts are empty'),
});
named(evaluateBody, 'ExpressionEvaluation', {
  description: 'An expression or template to try, and the context it sees',
  examples: [
    { expression: 'Hello, {{ $uppercase(trigger.name) }}', context: { trigger: { name: 'Ada' } } },
    { expression: '{{ {"total": $sum(nodes.cart.items.price)} }}', context: { nodes: { cart: { items: [{ price: 2 }, { price: 3 }] } } } },
  ],
});

const evaluated = z.object({
  value: z.unknown().describe('The result (null when the expression yields nothing: see `type`)'),
  type: z
    .enum(['undefined', 'null', 'string', 'number', 'boolean', 'array', 'object'])
    .describe('`undefined`: JSONata found nothing (a template shows it as empty text)'),
  template: z.boolean().describe('Evaluated as a template (the text held `{{ }}`), or as one bare expression'),
});

const typeOf = (value: unknown) => (value === undefined ? 'undefined' : value === null ? 'null' : Array.isArray(value) ? 'array' : (typeof value as 'string'));

/** Trying an expression before saving it: the sandbox, limits and rules of a run. */
export function expressionRoutes({
  expressions,
  limiter,
  config,
}: {
  expressions: Pick<ExpressionSandbox, 'resolve' | 'evaluate'>;
  limiter: Pick<RateLimiter, 'hit'>;
  config: Pick<Config, 'SVC_EXPRESSION_EVALUATIONS_PER_MINUTE'>;
}): AnyRoute[] {
  return [
    defineRoute({
      method: 'post',
      path: '/api/workflow/v1/expressions/evaluate',
      operationId: 'evaluateExpression',
      summary: 'Evaluates an expression or template against a context, as a run would',
      description:
        'The same JSONata sandbox as a run: its threads, its time and memory limits (`SVC_EXPRESSION_TIMEOUT_MS`, `SVC_EXPRESSION_MEMORY_MB`) and the template rules of node configurations (a `}}` inside the expression’s own braces, strings or comments does not end it). Answers the value, or 422 `expression_error` with `data.position` (0-based, in `expression`) or `expression_limit`. At most `SVC_EXPRESSION_EVALUATIONS_PER_MINUTE` per user (429 beyond).',
      tag: 'workflows',
      access: { capability: 'svc_manage_workflows' },
      body: evaluateBody,
      errors: {
        expression_error: 'The expression does not parse or fails (`data.position`, `data.expression`)',
        expression_limit: 'The expression ran past its time or memory limit',
      },
      responses: { 200: { description: 'The value', data: evaluated } },
      handler: async ({ body, principal }) => {
        const quota = await limiter.hit(`expressions:${principal!.id}`, config.SVC_EXPRESSION_EVALUATIONS_PER_MINUTE, 60);
        if (!quota.allowed) throw rateLimited(quota.retryAfterSeconds);
        const context: ExpressionContext = {
          trigger: body.context.trigger ?? {},
          nodes: body.context.nodes ?? {},
          execution: body.context.execution ?? { id: 0, workflow_id: 0 },
        };
        const template = body.expression.includes('{{');
        const value = await evaluateOne(expressions, body.expression, template, context);
        return { data: { value: value ?? null, type: typeOf(value), template } };
      },
    }),
  ];
}

/** Evaluates, answering a failure as 422 with where it is. */
async function evaluateOne(expressions: Pick<ExpressionSandbox, 'resolve' | 'evaluate'>, text: string, template: boolean, context: ExpressionContext) {
  // A run leaves a `{{` nothing closes as text; saving refuses it, and so does this.
  const [unclosed] = template ? templateProblems(text).filter((p) => p.message.includes('never closed')) : [];
  if (unclosed) throw new AppError('expression_error', unclosed.message, { position: unclosed.position ?? null, expression: text });
  try {
    return template ? await expressions.resolve(text, context) : await expressions.evaluate(text, context);
  } catch (err) {
    if (err instanceof ExpressionLimitError) throw new AppError('expression_limit', err.message);
    if (err instanceof ExpressionError) throw new AppError('expression_error', err.message, { position: err.position ?? null, expression: text });
    throw err;
  }
}
