import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { transformNode } from '../nodes/transform.node.js';
import { configInFile, workflowFileSchema } from './file-schema.js';

type Json = Record<string, any>;
const jsonOf = (schema: z.ZodType): Json => z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Json;

describe('the file form of a configuration schema', () => {
  it('names the workflow of a loop by slug and holds file nodes in its inline body, however the schema wraps them', () => {
    // A for_each as its module may declare it: the table's places are found by shape.
    const forEach = z.strictObject({
      items: z.string(),
      workflow_id: z.number().int().positive().optional(),
      body: z.strictObject({ nodes: z.array(z.record(z.string(), z.unknown())).min(1), edges: z.array(z.unknown()).default([]) }).optional(),
      concurrency: z.number().int().default(10),
    });
    const file = configInFile('for_each', forEach) as z.ZodObject;
    const shape = file.shape as Record<string, z.ZodType>;
    expect(Object.keys(shape).sort()).toEqual(['body', 'concurrency', 'items', 'workflow']);
    expect(shape.workflow!.safeParse(undefined).success).toBe(true);
    expect(shape.workflow!.safeParse('child-flow').success).toBe(true);
    expect(shape.workflow!.safeParse(3).success).toBe(false);
    expect(file.safeParse({ items: 'x', workflow_id: 3 }).success).toBe(false);
    // The body's nodes are file nodes: the union of every node type, as in the file itself.
    const nodes = ((shape.body as z.ZodOptional).unwrap() as z.ZodObject).shape.nodes as z.ZodArray;
    const element = nodes.element as z.ZodLazy;
    expect(element).toBeInstanceOf(z.ZodLazy);
    expect(z.globalRegistry.get(element.def.getter() as z.ZodType)?.id).toBe('WorkflowFileNode');
    expect(file.safeParse({ items: 'x', body: { nodes: [{ id: 'a', type: 'transform', config: { value: 1 } }] } }).success).toBe(true);
    expect(file.safeParse({ items: 'x', body: { nodes: [{ id: 'a', type: 'run_workflow', config: { workflow_id: 3 } }] } }).success).toBe(false);
    expect(workflowFileSchema()).toBeDefined();
  });

  it('names a notification connection by label and keeps approvers as logins', () => {
    const approval = z.strictObject({
      approvers: z.strictObject({ users: z.array(z.string()).optional(), capability: z.string().optional() }),
      notify: z.strictObject({ connection_id: z.number().int(), path: z.string() }).optional(),
    });
    const json = jsonOf(configInFile('approval', approval));
    expect(json.properties.notify.properties.connection).toMatchObject({ type: 'string' });
    expect(json.properties.notify.properties.connection_id).toBeUndefined();
    expect(json.properties.notify.required).toEqual(['path', 'connection']);
    expect(json.properties.approvers.properties.users).toEqual({ type: 'array', items: { type: 'string' } });
  });

  it('leaves a configuration the table has no place in as it is', () => {
    expect(configInFile('transform', transformNode.configSchema)).toBe(transformNode.configSchema);
    // An inline body only where the type keeps one: an http_request body is the request's data.
    const http = z.strictObject({ body: z.strictObject({ nodes: z.array(z.unknown()) }).optional() });
    expect(configInFile('http_request', http)).toBe(http);
  });
});
