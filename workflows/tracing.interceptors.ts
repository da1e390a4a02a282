/**
 * Workflow interceptors of OpenTelemetry tracing, bundled with the workflow code. They trace a run
 * only when it was started (or sent an update or signal) with a trace context in its headers, as
 * the API's client does when tracing is on; other runs go straight through and pay nothing.
 */
import type {
  OpenTelemetryInboundInterceptor,
  OpenTelemetryInternalsInterceptor,
  OpenTelemetryOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry/lib/workflow/index.js';
import type { WorkflowInterceptorsFactory } from '@temporalio/workflow';

type OtelWorkflowModule = typeof import('@temporalio/interceptors-opentelemetry/lib/workflow/index.js');

/**
 * The OpenTelemetry workflow module, evaluated on a run's first traced call. The worker evaluates
 * a run's modules in the run's own context when the run starts; imported at the top, this one
 * (and the OpenTelemetry packages under it) would be evaluated for every run, traced or not,
 * which cost an untraced run more than any other module of its code. Required here instead, it is
 * still in the bundle (webpack resolves the call), and evaluated synchronously, so a traced call
 * takes the same steps as when it was imported.
 */
// eslint-disable-next-line no-restricted-syntax, @typescript-eslint/no-require-imports -- the module a static import would load, only later: deterministic
const otelModule = (): OtelWorkflowModule => require('@temporalio/interceptors-opentelemetry/lib/workflow/index.js') as OtelWorkflowModule;

/** The header the interceptors carry the trace context in. */
const TRACE_HEADER = '_tracer-data';

export const interceptors: WorkflowInterceptorsFactory = () => {
  let traced = false;
  // Built on the first traced call only: building them (and evaluating their module) sets up a
  // tracer provider, which an untraced run (most runs, and every run while tracing is off) would
  // pay for nothing.
  let otel: { inbound: OpenTelemetryInboundInterceptor; outbound: OpenTelemetryOutboundInterceptor; internals: OpenTelemetryInternalsInterceptor } | undefined;
  const tracer = () => {
    if (otel) return otel;
    const m = otelModule();
    return (otel = {
      inbound: new m.OpenTelemetryInboundInterceptor(),
      outbound: new m.OpenTelemetryOutboundInterceptor(),
      internals: new m.OpenTelemetryInternalsInterceptor(),
    });
  };
  const carries = (headers: Record<string, unknown>) => (TRACE_HEADER in headers ? (traced = true) : false);
  return {
    inbound: [
      {
        execute: (input, next) => (carries(input.headers) ? tracer().inbound.execute(input, next) : next(input)),
        handleSignal: (input, next) => (carries(input.headers) ? tracer().inbound.handleSignal(input, next) : next(input)),
        handleUpdate: (input, next) => (carries(input.headers) ? tracer().inbound.handleUpdate(input, next) : next(input)),
        validateUpdate: (input, next) => (TRACE_HEADER in input.headers ? tracer().inbound.validateUpdate(input, next) : next(input)),
        handleQuery: (input, next) => (TRACE_HEADER in input.headers ? tracer().inbound.handleQuery(input, next) : next(input)),
      },
    ],
    outbound: [
      {
        scheduleActivity: (input, next) => (traced ? tracer().outbound.scheduleActivity(input, next) : next(input)),
        scheduleLocalActivity: (input, next) => (traced ? tracer().outbound.scheduleLocalActivity(input, next) : next(input)),
        startChildWorkflowExecution: (input, next) => (traced ? tracer().outbound.startChildWorkflowExecution(input, next) : next(input)),
        continueAsNew: (input, next) => (traced ? tracer().outbound.continueAsNew(input, next) : next(input)),
        signalWorkflow: (input, next) => (traced ? tracer().outbound.signalWorkflow(input, next) : next(input)),
        getLogAttributes: (input, next) => (traced ? tracer().outbound.getLogAttributes(input, next) : next(input)),
      },
    ],
    internals: [{ dispose: (input, next) => (traced ? tracer().internals.dispose(input, next) : next(input)) }],
  };
};
