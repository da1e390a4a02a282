/**
 * Workflow interceptors of OpenTelemetry tracing, bundled with the workflow code. They trace a run
 * only when it was started (or sent an update or signal) with a trace context in its headers, as
 * the API's client does when tracing is on; other runs go straight through and pay nothing.
 */
import {
  OpenTelemetryInboundInterceptor,
  OpenTelemetryInternalsInterceptor,
  OpenTelemetryOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry/lib/workflow/index.js';
import type { WorkflowInterceptorsFactory } from '@temporalio/workflow';

/** The header the interceptors carry the trace context in. */
const TRACE_HEADER = '_tracer-data';

export const interceptors: WorkflowInterceptorsFactory = () => {
  let traced = false;
  const inbound = new OpenTelemetryInboundInterceptor();
  const outbound = new OpenTelemetryOutboundInterceptor();
  const internals = new OpenTelemetryInternalsInterceptor();
  const carries = (headers: Record<string, unknown>) => (TRACE_HEADER in headers ? (traced = true) : false);
  return {
    inbound: [
      {
        execute: (input, next) => (carries(input.headers) ? inbound.execute(input, next) : next(input)),
        handleSignal: (input, next) => (carries(input.headers) ? inbound.handleSignal(input, next) : next(input)),
        handleUpdate: (input, next) => (carries(input.headers) ? inbound.handleUpdate(input, next) : next(input)),
        validateUpdate: (input, next) => (TRACE_HEADER in input.headers ? inbound.validateUpdate(input, next) : next(input)),
        handleQuery: (input, next) => (TRACE_HEADER in input.headers ? inbound.handleQuery(input, next) : next(input)),
      },
    ],
    outbound: [
      {
        scheduleActivity: (input, next) => (traced ? outbound.scheduleActivity(input, next) : next(input)),
        scheduleLocalActivity: (input, next) => (traced ? outbound.scheduleLocalActivity(input, next) : next(input)),
        startChildWorkflowExecution: (input, next) => (traced ? outbound.startChildWorkflowExecution(input, next) : next(input)),
        continueAsNew: (input, next) => (traced ? outbound.continueAsNew(input, next) : next(input)),
        signalWorkflow: (input, next) => (traced ? outbound.signalWorkflow(input, next) : next(input)),
        getLogAttributes: (input, next) => (traced ? outbound.getLogAttributes(input, next) : next(input)),
      },
    ],
    internals: [{ dispose: (input, next) => (traced ? internals.dispose(input, next) : next(input)) }],
  };
};
