import { afterAll, describe, expect, it } from 'vitest';
import { ExpressionSandbox } from './expression-sandbox.js';
import { ExpressionError, checkTemplates, hasTemplates, templateProblems } from './expressions.js';

const context = {
  trigger: { since: '2026-01-01', n: 3, name: 'Ada' },
  nodes: { fetch: { body: { count: 12, items: [1, 2] } } },
  execution: { id: 1, workflow_id: 2 },
};

const sandbox = new ExpressionSandbox({ threads: 2, timeoutMs: 1000, memoryMb: 64, resultBytes: 512 * 1024 });
afterAll(() => sandbox.close());
const resolve = (template: unknown) => sandbox.resolve(template, context);

describe('templates', () => {
  it('yields the raw value for a whole {{ }} and text for embedded ones', async () => {
    expect(await resolve('{{ nodes.fetch.body.count > 10 }}')).toBe(true);
    expect(await resolve('{{ nodes.fetch.body.items }}')).toEqual([1, 2]);
    expect(await resolve('/leads?since={{ trigger.since }}&n={{ trigger.n }}')).toBe('/leads?since=2026-01-01&n=3');
    expect(await resolve({ a: ['{{ trigger.name }}', 5], '{{ key }}': 'x' })).toEqual({ a: ['Ada', 5], '{{ key }}': 'x' });
    expect(await resolve('id {{ execution.id }} of {{ execution.workflow_id }}')).toBe('id 1 of 2');
    expect(await resolve('missing: {{ trigger.nothing }}.')).toBe('missing: .');
    expect(await resolve('{{ $uppercase(trigger.name) }}')).toBe('ADA');
  });

  it('evaluates a JSONata object whose braces end in }} as one expression', async () => {
    expect(await resolve('{{ {"a": {"b": trigger.n}} }}')).toEqual({ a: { b: 3 } });
    expect(await resolve('n={{ {"a":trigger.n}.a }}; s={{ "}}" }}')).toBe('n=3; s=}}');
    expect(checkTemplates({ v: '{{ {"a": {"b": 1}} }}' })).toEqual([]);
  });

  it('reports a {{ nothing closes at definition time, and leaves it as text at run time', async () => {
    expect(checkTemplates({ v: 'ok {{ {"a": 1 }}' })).toEqual([{ field: 'config.v', message: '"{{" at 3 is never closed by a matching "}}"' }]);
    expect(await resolve('ok {{ {"a": 1 }}')).toBe('ok {{ {"a": 1 }}');
  });

  it('says where in the template string an expression fails', async () => {
    const [problem] = templateProblems('abc {{ 1 + }}');
    expect(problem!.position).toBe(10);
    const failure = await resolve('x {{ $number("abc") }}').catch((err: ExpressionError) => err);
    expect(failure).toBeInstanceOf(ExpressionError);
    expect((failure as ExpressionError).position).toBeGreaterThanOrEqual(5);
  });

  it('returns a template without expressions as it is, without a thread', async () => {
    const plain = { method: 'GET', path: '/x', n: [1, { deep: true }] };
    expect(hasTemplates(plain)).toBe(false);
    expect(await resolve(plain)).toBe(plain);
  });

  it('reports syntax errors with their position, at definition time', () => {
    const problems = checkTemplates({ ok: '{{ 1 + 1 }}', bad: ['{{ 1 + }}'] });
    expect(problems).toHaveLength(1);
    expect(problems[0]!.field).toBe('config.bad.0');
    expect(problems[0]!.message).toMatch(/Invalid expression/);
  });

  it('reports a failing expression as ExpressionError', async () => {
    await expect(resolve('{{ $number("abc") + }}')).rejects.toBeInstanceOf(ExpressionError);
    await expect(resolve('{{ $number("abc") }}')).rejects.toThrow(/failed/);
  });
});
