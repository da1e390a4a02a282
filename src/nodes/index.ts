import { z } from 'zod';
import { documentAs, named, pascal, schemaRef } from '../http/openapi.js';
import { approvalNode } from './approval.node.js';
import { conditionNode } from './condition.node.js';
import { delayNode } from './delay.node.js';
import { emitEventNode } from './emit-event.node.js';
import { failNode } from './fail.node.js';
import { forEachNode } from './for-each.node.js';
import { httpRequestNode } from './http-request.node.js';
import { llmPromptNode } from './llm-prompt.node.js';
import type { NodeRunMode } from '../../workflows/defs.js';
import type { NodeType } from './node-type.js';
import { recordCreateNode, recordQueryNode, recordUpdateNode } from './record-nodes.js';
import { runWorkflowNode } from './run-workflow.node.js';
import { switchNode } from './switch.node.js';
import { transformNode } from './transform.node.js';
import { waitForEventNode } from './wait-for-event.node.js';

/** The node catalogue: one module per type. A new type is one module and one line here. */
export const nodeTypes: ReadonlyMap<string, NodeType<any>> = new Map(
  [
    httpRequestNode,
    transformNode,
    conditionNode,
    switchNode,
    delayNode,
    runWorkflowNode,
    failNode,
    recordCreateNode,
    recordUpdateNode,
    recordQueryNode,
    llmPromptNode,
    waitForEventNode,
    emitEventNode,
    approvalNode,
    forEachNode,
  ].map((n) => [n.type, n as NodeType<any>]),
);

/** How the interpreter runs each type; pure types as local activities when `localPure`. */
export function nodeRunModes(localPure: boolean): Record<string, NodeRunMode> {
  return Object.fromEntries([...nodeTypes.values()].map((n) => [n.type, n.runsAs ?? (localPure && n.pure ? 'local' : 'activity')]));
}

/** Types whose short calls run as local activities (see NodeType.localWhenShort). */
export const shortLocalTypes = (): string[] => [...nodeTypes.values()].filter((n) => n.localWhenShort).map((n) => n.type);

/**
 * What the OpenAPI document shows for a node (`Node`): one named schema per type (`DelayNode`,
 * ...) with that type's configuration (`DelayNodeConfig`), derived from `node`, the schema
 * requests are parsed with. The types and configurations themselves are checked with the whole
 * graph, so that every problem is listed at once; the document lets a client's types refuse an
 * unknown type or a wrong configuration before the request is sent.
 */
export function documentedNode(node: z.ZodObject): z.ZodType {
  // A for_each body holds nodes: its configuration is documented with a reference to this union.
  const anyNode = schemaRef('Node');
  const branches = [...nodeTypes.values()].map((t) => {
    const name = pascal(t.type);
    const documented = t.documentedConfig?.(anyNode) ?? t.configSchema;
    // The config is stored as it was sent (its `{{ }}` evaluated at run time): answers show the request form.
    const config = documentAs(z.record(z.string(), z.unknown()), documented.meta({ id: `${name}NodeConfig`, description: t.description }), 'input');
    return node
      .extend({
        type: z.literal(t.type),
        // The graph check sees a missing config as `{}`.
        config: t.configSchema.safeParse({}).success ? config.default({}) : config,
        ...(t.needsConnection ? { connection_id: node.shape.connection_id!.unwrap() } : {}),
      })
      .meta({ id: `${name}Node`, description: `A \`${t.type}\` node: ${t.description}` });
  });
  return named(z.discriminatedUnion('type', branches as unknown as [z.ZodObject, ...z.ZodObject[]]), 'Node', {
    description: 'One node of a workflow graph; `type` decides the shape of `config`',
  });
}
