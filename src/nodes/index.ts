import { conditionNode } from './condition.node.js';
import { delayNode } from './delay.node.js';
import { failNode } from './fail.node.js';
import { httpRequestNode } from './http-request.node.js';
import { llmPromptNode } from './llm-prompt.node.js';
import type { NodeRunMode } from '../../workflows/defs.js';
import type { NodeType } from './node-type.js';
import { recordCreateNode, recordQueryNode, recordUpdateNode } from './record-nodes.js';
import { runWorkflowNode } from './run-workflow.node.js';
import { switchNode } from './switch.node.js';
import { transformNode } from './transform.node.js';

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
  ].map((n) => [n.type, n as NodeType<any>]),
);

/** How the interpreter runs each type; pure types as local activities when `localPure`. */
export function nodeRunModes(localPure: boolean): Record<string, NodeRunMode> {
  return Object.fromEntries([...nodeTypes.values()].map((n) => [n.type, n.runsAs ?? (localPure && n.pure ? 'local' : 'activity')]));
}
