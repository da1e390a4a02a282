// Every workflow type the worker registers. Deterministic code only: no Node built-ins, no I/O,
// nothing from src/ (a test checks the imports). Side effects live in activities/.
export { runGraph } from './run-graph.workflow.js';
export { forEachItems } from './for-each.workflow.js';
export { agentSession } from './agent-session.workflow.js';
export { deliverLicenseWebhook } from './license-webhook.workflow.js';
