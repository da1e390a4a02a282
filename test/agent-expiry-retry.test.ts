import { randomUUID } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { agentMessageUpdate } from '../workflows/agent.updates.js';
import type { AgentModelCallResult, AgentOpenedGate, AgentSessionInput } from '../workflows/defs.js';

/**
 * The session workflow on its own, with scripted activities: a gate whose expiry cannot be stored
 * (the database down through every retry) is not left waiting for a decision the API would
 * refuse; the workflow tries to store the expiry again, and the turn goes on once it can.
 */
const taskQueue = `expiry-retry-${randomUUID()}`;
let connection: Connection;
let worker: Worker;
let running: Promise<void>;
const calls = { model: 0, expire: 0, tool: [] as unknown[] };

beforeAll(async () => {
  connection = await Connection.connect({ address: inject('temporalAddress') });
  worker = await Worker.create({
    connection: await NativeConnection.connect({ address: inject('temporalAddress') }),
    taskQueue,
    workflowBundle: { codePath: inject('workflowBundle') },
    activities: {
      async agentBeginTurn() {},
      async agentFinishTurn() {},
      async agentCallModel(): Promise<AgentModelCallResult> {
        calls.model++;
        if (calls.model === 1)
          return { text: '', toolCalls: [{ id: 'c1', name: 'records_delete', args: { entity: 'note', uuid: 'x' } }], tokensIn: 1, tokensOut: 1, costUsd: 0 };
        return { text: 'It expired, so nothing was deleted.', toolCalls: [], tokensIn: 1, tokensOut: 1, costUsd: 0 };
      },
      async agentOpenGate(input: { actionId: string }): Promise<AgentOpenedGate> {
        return { action_id: input.actionId, tool: 'records_delete', args: { entity: 'note', uuid: 'x' }, summary: 'delete x', ttl_ms: 300 };
      },
      async agentExpireAction(): Promise<{ status: 'expired' }> {
        calls.expire++;
        // The first attempt fails for good, as after every retry of a long database outage.
        if (calls.expire === 1) throw ApplicationFailure.nonRetryable('the database is down', 'not_found');
        return { status: 'expired' };
      },
      async agentRunTool(input: { decision?: unknown }) {
        calls.tool.push(input.decision);
        return { summary: 'expired: nobody approved it in time' };
      },
    },
  });
  running = worker.run();
});
afterAll(async () => {
  worker?.shutdown();
  await running;
  await connection?.close();
});

it('an expiry that could not be stored is tried again, and the turn goes on once it is', async () => {
  const client = new Client({ connection });
  const input: AgentSessionInput = { sessionId: randomUUID(), maxModelCalls: 5, updatesPerRun: 100, expiryRetryMs: 300 };
  const handle = await client.workflow.start('agentSession', { taskQueue, workflowId: `expiry-retry-${input.sessionId}`, args: [input] });
  try {
    const outcome = await handle.executeUpdate(agentMessageUpdate, { args: [{ turnId: randomUUID(), content: 'delete x' }] });
    expect(outcome.outcome).toBe('gate_pending');
    const deadline = Date.now() + 20_000;
    while (calls.model < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
    expect(calls.expire).toBe(2);
    expect(calls.tool).toEqual([expect.objectContaining({ approved: false, expired: true })]);
    expect(calls.model).toBe(2);
  } finally {
    await handle.terminate('test over');
  }
});
