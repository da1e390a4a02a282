import { describe, expect, it } from 'vitest';
import { ExpressionError, checkTemplates, resolveTemplate } from './expressions.js';

const context = {
  trigger: { since: '2026-01-01', n: 3, name: 'Ada' },
  nodes: { fetch: { body: { count: 12, items: [1, 2] } } },
  execution: { id: 1, workflow_id: 2 },
};

describe('templates', () => {
  it('yields the raw value for a whole {{ }} and text for embedded ones', async () => {
    expect(await resolveTemplate('{{ nodes.fetch.body.count > 10 }}', context)).toBe(true);
    expect(await resolveTemplate('{{ nodes.fetch.body.items }}', context)).toEqual([1, 2]);
    expect(await resolveTemplate('/leads?since={{ trigger.since }}&n={{ trigger.n }}', context)).toBe('/leads?since=2026-01-01&n=3');
    expect(await resolveTemplate({ a: ['{{ trigger.name }}', 5], '{{ key }}': 'x' }, context)).toEqual({ a: ['Ada', 5], '{{ key }}': 'x' });
    expect(await resolveTemplate('id {{ execution.id }} of {{ execution.workflow_id }}', context)).toBe('id 1 of 2');
    expect(await resolveTemplate('missing: {{ trigger.nothing }}.', context)).toBe('missing: .');
  });

  it('reports syntax errors with their position, at definition time', () => {
    const problems = checkTemplates({ ok: '{{ 1 + 1 }}', bad: ['{{ 1 + }}'] });
    expect(problems).toHaveLength(1);
    expect(problems[0]!.field).toBe('config.bad.0');
    expect(problems[0]!.message).toMatch(/Invalid expression/);
  });

  it('stops runaway expressions', async () => {
    const runaway = '{{ ( $f := function($n) { $f($n + 1) }; $f(0) ) }}';
    await expect(resolveTemplate(runaway, context)).rejects.toBeInstanceOf(ExpressionError);
  });
});
