import { describe, expect, it } from 'vitest';
import { createLogger } from '../platform/logger.js';
import { TURN_ANSWERED_CHANNEL, answeredOutcome, turnAnnouncement, turnAnsweredAnnouncements } from './agent.turns.js';

describe('an answered turn announced by its model call', () => {
  it('says what the workflow will: the turn so far with this call’s usage, its wall time to now', () => {
    const announce = {
      toolsCalled: [{ name: 'entities_list', args: {}, result_summary: '1 entity' }],
      telemetry: { tokens_in: 10, tokens_out: 4, wall_ms: 30, cost_usd: 0.000001 },
      startedAt: 1_000,
    };
    const outcome = answeredOutcome(announce, { text: 'done', tokensIn: 5, tokensOut: 2, costUsd: 0.0000004 }, 1_250);
    expect(outcome).toEqual({
      outcome: 'answered',
      assistant_message: 'done',
      tools_called: announce.toolsCalled,
      telemetry: { tokens_in: 15, tokens_out: 6, wall_ms: 280, cost_usd: 0.000001 },
    });
    // The turn's own telemetry is left as it was.
    expect(announce.telemetry).toEqual({ tokens_in: 10, tokens_out: 4, wall_ms: 30, cost_usd: 0.000001 });
  });

  it('is sent whole, or not at all when too large for a notification (its caller then waits for the update)', () => {
    const outcome = (text: string) => ({
      outcome: 'answered' as const,
      assistant_message: text,
      tools_called: [],
      telemetry: { tokens_in: 1, tokens_out: 1, wall_ms: 1, cost_usd: 0 },
    });
    expect(turnAnnouncement('t-1', outcome('short'))).toEqual({
      channel: TURN_ANSWERED_CHANNEL,
      payload: JSON.stringify({ turn_id: 't-1', outcome: outcome('short') }),
    });
    expect(turnAnnouncement('t-1', outcome('é'.repeat(4_000)))).toBeUndefined();
  });

  it('is heard by the caller waiting for that turn only; unreadable payloads are ignored', async () => {
    let deliver!: (payload: string) => void;
    const hub = {
      listen: async (_channel: string, onPayload: (payload: string) => void) => void (deliver = onPayload),
      connected: async () => undefined,
    };
    const answers = turnAnsweredAnnouncements(hub, createLogger('silent'));
    const stop = new AbortController();
    const waiting = answers.heard('t-1', stop.signal);
    await Promise.resolve();
    const outcome = { outcome: 'answered', assistant_message: 'hi', tools_called: [], telemetry: { tokens_in: 1, tokens_out: 1, wall_ms: 1, cost_usd: 0 } };
    for (const payload of [
      '',
      'not json',
      '{"turn_id": 7}',
      JSON.stringify({ turn_id: 't-1', outcome: { outcome: 'failed' } }),
      JSON.stringify({ turn_id: 't-2', outcome }),
    ])
      deliver(payload);
    const early = await Promise.race([waiting, new Promise((resolve) => setTimeout(() => resolve('pending'), 20))]);
    expect(early).toBe('pending');
    deliver(JSON.stringify({ turn_id: 't-1', outcome }));
    expect(await waiting).toEqual(outcome);
    stop.abort();
  });
});
