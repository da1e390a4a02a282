import { describe, expect, it } from 'vitest';
import { validateGraph } from '../workflow-definitions/graph-validator.js';
import { approvalNode } from './approval.node.js';
import { nodeTypes, nodeRunModes } from './index.js';
import { waitForEventNode } from './wait-for-event.node.js';

const manual = { type: 'manual', config: {} } as const;
const fields = (problems: { field: string }[]) => problems.map((p) => p.field);

describe('the nodes that wait', () => {
  it('run in workflow code of their own, not as activities', () => {
    expect(nodeRunModes(true)).toMatchObject({ wait_for_event: 'wait', approval: 'approval', emit_event: 'activity' });
  });

  it('a wait branches on received and timeout; its lookback defaults to 10 minutes and is bounded', () => {
    const graph = {
      nodes: [
        { id: 'w', type: 'wait_for_event', config: { event: 'payment.received', key: '{{ trigger.order_id }}', timeout_ms: 172_800_000 } },
        { id: 'ok', type: 'transform', config: { value: 1 } },
        { id: 'late', type: 'transform', config: { value: 2 } },
      ],
      edges: [
        { from: 'w', to: 'ok', branch: 'received' },
        { from: 'w', to: 'late', branch: 'timeout' },
      ],
    };
    expect(validateGraph(graph, manual, nodeTypes)).toEqual([]);
    expect(waitForEventNode.configSchema.parse(graph.nodes[0]!.config)).toMatchObject({ lookback_ms: 600_000 });
    expect(waitForEventNode.resolvedSchema!.parse({ event: 'e', key: 1001, timeout_ms: 1 })).toMatchObject({ key: '1001' });
    expect(waitForEventNode.resolvedSchema!.safeParse({ event: 'e', key: 'x'.repeat(201), timeout_ms: 1 }).success).toBe(false);
    const bad = validateGraph(
      { ...graph, nodes: [{ ...graph.nodes[0]!, config: { event: 'e', key: 'k', timeout_ms: 1, lookback_ms: 86_400_001 } }, ...graph.nodes.slice(1)] },
      manual,
      nodeTypes,
    );
    expect(fields(bad)).toEqual(['nodes.0.config.lookback_ms']);
  });

  it('an approval branches on approved, rejected and expired; its fields go together as they must', () => {
    const base = { summary: 's', approvers: { users: ['grace'] }, timeout_ms: 60_000 };
    expect(approvalNode.branches!({})).toEqual(['approved', 'rejected', 'expired']);
    expect(approvalNode.configSchema.safeParse(base).success).toBe(true);
    const check = (config: object) => {
      const parsed = approvalNode.configSchema.safeParse({ ...base, ...config });
      return parsed.success ? [] : parsed.error.issues.map((i) => i.path.join('.'));
    };
    expect(check({ required: 2 })).toEqual(['required']);
    expect(check({ required: 2, approvers: { users: ['grace', 'grace'] } })).toEqual(['required']);
    expect(check({ required: 2, approvers: { capability: 'svc_agent_approve' } })).toEqual([]);
    expect(check({ remind_every_ms: 1000 })).toEqual(['remind_every_ms']);
    expect(check({ remind_every_ms: 999, notify: { connection_id: 1, path: '/' } })).toEqual(['remind_every_ms']);
    expect(check({ escalate_after_ms: 5000 })).toEqual(['escalate_to']);
    expect(check({ escalate_to: { users: ['linus'] } })).toEqual(['escalate_after_ms']);
    expect(check({ editable: { type: 'object', properties: {} } })).toEqual(['editable']);
    // A maximum taken from the trigger: stored as an expression, compiled once evaluated.
    const capped = { editable: { type: 'object', properties: { amount: { type: 'number', maximum: '{{ trigger.amount }}' } } } };
    expect(check(capped)).toEqual([]);
    expect(approvalNode.resolvedSchema!.safeParse({ ...base, ...capped }).success).toBe(false);
    expect(
      approvalNode.resolvedSchema!.safeParse({ ...base, editable: { type: 'object', properties: { amount: { type: 'number', maximum: 1800 } } } }).success,
    ).toBe(true);
    expect(check({ approvers: { users: [] } })).toContain('approvers.users');
  });

  it('an approval names the connection it notifies through and the literal logins it asks', () => {
    expect(
      approvalNode.references!({
        ...{ summary: 's', timeout_ms: 1 },
        approvers: { users: ['grace', '{{ trigger.manager }}'] },
        escalate_to: { users: ['barbara'] },
        notify: { connection_id: 7, path: '/x' },
      }),
    ).toEqual({
      connections: [{ id: 7, field: 'notify.connection_id' }],
      logins: [
        { login: 'grace', field: 'approvers.users.0' },
        { login: 'barbara', field: 'escalate_to.users.0' },
      ],
    });
  });
});
