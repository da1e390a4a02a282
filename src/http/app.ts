import Router from '@koa/router';
import Koa from 'koa';
import { koaBody } from 'koa-body';
import { agentGateRoutes } from '../agent/agent-gate.routes.js';
import { agentRoutes } from '../agent/agent.routes.js';
import { approvalPageRoutes } from '../approvals/approval-page.routes.js';
import { authRoutes } from '../auth/auth.routes.js';
import { connectionRoutes } from '../connections/connection.routes.js';
import { expressionRoutes } from '../nodes/expression.routes.js';
import { executionRoutes } from '../executions/execution.routes.js';
import { eventRoutes } from '../events/event.routes.js';
import { codecCors, codecRoutes } from '../temporal/codec.routes.js';
import { webhookRoutes } from '../workflow-definitions/webhook.routes.js';
import { workflowRoutes } from '../workflow-definitions/workflow.routes.js';
import { workflowFilesRoutes } from '../workflow-files/workflow-files.routes.js';
import { licenseAdminRoutes } from '../licenses/license-admin.routes.js';
import { licenseRoutes } from '../licenses/license.routes.js';
import { licenseWebhookRoutes } from '../licenses/license-webhooks.routes.js';
import { AppError } from '../platform/errors.js';
import { entityRoutes } from '../records/entity.routes.js';
import { recordRoutes } from '../records/record.routes.js';
import type { Services } from '../services.js';
import { healthRoutes } from './health.routes.js';
import { authenticate, errorRenderer, requestContext } from './middleware.js';
import { buildOpenApi } from './openapi.js';
import { toMiddleware, type AnyRoute } from './route.js';

export const API_VERSION = '1.0.0';

/** Every route of every feature; the OpenAPI document is generated from this list. */
export function allRoutes(services: Services): AnyRoute[] {
  let document: unknown;
  const routes: AnyRoute[] = [];
  const openApi = () => (document ??= buildOpenApi(routes, API_VERSION));
  routes.push(
    ...healthRoutes(services, openApi),
    ...authRoutes(services),
    ...workflowRoutes(services),
    ...workflowFilesRoutes(services, openApi),
    ...webhookRoutes(services),
    ...connectionRoutes(services),
    ...executionRoutes(services),
    ...eventRoutes(services),
    ...approvalPageRoutes(services),
    ...codecRoutes(services),
    ...licenseRoutes(services),
    ...licenseAdminRoutes(services),
    ...licenseWebhookRoutes(services),
    ...entityRoutes(services),
    ...recordRoutes(services),
    ...agentRoutes(services),
    ...agentGateRoutes(services),
    ...expressionRoutes(services),
  );
  return routes;
}

/** Builds the Koa application without listening, so tests and entry points share it. */
export function buildApp(services: Services): { app: Koa; routes: AnyRoute[] } {
  const { config, logger, auth } = services;
  const app = new Koa({ proxy: config.TRUST_PROXY, maxIpsCount: config.TRUST_PROXY ? 1 : 0 });
  app.silent = true;
  const router = new Router();
  const routes = allRoutes(services);
  for (const route of routes) {
    router[route.method](route.operationId, route.path.replace(/\{(\w+)\}/g, ':$1'), toMiddleware(route));
  }
  app.use(requestContext(logger, services.metrics));
  app.use(errorRenderer());
  app.use(codecCors(services.temporal.uiUrl));
  app.use(
    koaBody({
      json: true,
      urlencoded: true,
      text: false,
      multipart: false,
      jsonStrict: true,
      jsonLimit: config.SVC_BODY_LIMIT,
      formLimit: config.SVC_BODY_LIMIT,
      parsedMethods: ['POST', 'PUT', 'PATCH', 'DELETE'] as never,
    }),
  );
  app.use(authenticate(auth));
  app.use(router.routes());
  app.use(
    router.allowedMethods({
      throw: true,
      methodNotAllowed: () => new AppError('method_not_allowed', 'Method not allowed on this path'),
      // A method no route knows (TRACE, say) is the caller's mistake: 405, never a 5xx.
      notImplemented: () => new AppError('method_not_allowed', 'Method not allowed on this path'),
    }),
  );
  return { app, routes };
}
