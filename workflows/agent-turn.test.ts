import { describe, expect, it } from 'vitest';
import { addUsage, decisionOf, modelCallLimitMessage, newTurn, remainingWatch, toolCalled, watchFrom, withWallTime } from './agent-turn.js';

describe('agent turn', () => {
  it('starts a lean turn with the message for its first model call, an earlier turn without', () => {
    const lean = newTurn('t1', 'hello', true);
    expect(lean).toEqual({
      turnId: 't1',
      modelCalls: 0,
      queue: [],
      toolsCalled: [],
      telemetry: { tokens_in: 0, tokens_out: 0, wall_ms: 0, cost_usd: 0 },
      lean: true,
      userMessage: 'hello',
    });
    const full = newTurn('t2', 'hello', false);
    expect(full).not.toHaveProperty('lean');
    expect(full).not.toHaveProperty('userMessage');
    // Each turn gets its own lists and telemetry: nothing is shared between turns.
    full.queue.push({ id: 'c', name: 'x', args: {} });
    full.telemetry.tokens_in = 5;
    expect(newTurn('t3', '', false).queue).toEqual([]);
    expect(newTurn('t3', '', false).telemetry.tokens_in).toBe(0);
  });

  it('passes a decision on with only the fields the approver gave', () => {
    expect(decisionOf({ actionId: 'a', approved: false, decidedBy: 7 })).toEqual({ actionId: 'a', approved: false, decidedBy: 7 });
    const edited = decisionOf({ actionId: 'a', approved: true, decidedBy: 7, note: '', editedArgs: { to: 'b' }, streamChannel: 'ch' });
    expect(edited).toEqual({ actionId: 'a', approved: true, decidedBy: 7, note: '', editedArgs: { to: 'b' } });
    expect(edited).not.toHaveProperty('streamChannel');
  });

  it('adds wall time without touching the telemetry it reads', () => {
    const telemetry = { tokens_in: 1, tokens_out: 2, wall_ms: 100, cost_usd: 0.5 };
    expect(withWallTime(telemetry, 1_000, 1_250)).toEqual({ tokens_in: 1, tokens_out: 2, wall_ms: 350, cost_usd: 0.5 });
    expect(telemetry.wall_ms).toBe(100);
  });

  it('adds tokens and cost, the cost rounded to a millionth of a dollar', () => {
    const telemetry = { tokens_in: 10, tokens_out: 20, wall_ms: 0, cost_usd: 0.1 };
    addUsage(telemetry, { tokensIn: 3, tokensOut: 4, costUsd: 0.2 });
    // 0.1 + 0.2 is 0.30000000000000004 in floating point.
    expect(telemetry).toEqual({ tokens_in: 13, tokens_out: 24, wall_ms: 0, cost_usd: 0.3 });
    addUsage(telemetry, { tokensIn: 0, tokensOut: 0, costUsd: 0.0000004 });
    expect(telemetry.cost_usd).toBe(0.3);
    addUsage(telemetry, { tokensIn: 0, tokensOut: 0, costUsd: 0.0000006 });
    expect(telemetry.cost_usd).toBe(0.300001);
  });

  it('names the limit in the message of a turn that reached it', () => {
    expect(modelCallLimitMessage(8)).toBe('I stopped here: this turn reached its limit of 8 model calls. Send another message to let me continue.');
  });

  it('watches a deadline from now, and again with what is left of it', () => {
    const watched = watchFrom('a', 60_000, 1_000);
    expect(watched).toEqual({ actionId: 'a', ttlMs: 60_000, deadline: 61_000 });
    expect(remainingWatch(watched, 41_000)).toEqual({ actionId: 'a', ttlMs: 20_000, deadline: 61_000 });
    expect(remainingWatch(watched, 90_000)).toEqual({ actionId: 'a', ttlMs: 0, deadline: 61_000 });
    expect(remainingWatch(undefined, 41_000)).toBeUndefined();
  });

  it('lists a tool call with the arguments it ran with', () => {
    const call = { id: 'c1', name: 'send_email', args: { to: 'model@example.org' } };
    expect(toolCalled(call, { summary: 'sent' })).toEqual({ name: 'send_email', args: { to: 'model@example.org' }, result_summary: 'sent' });
    expect(toolCalled(call, { summary: 'sent', args: { to: 'approver@example.org' } })).toEqual({
      name: 'send_email',
      args: { to: 'approver@example.org' },
      result_summary: 'sent',
    });
  });
});
