import { SpanKind, SpanStatusCode, context, propagation, trace, type Attributes, type Span } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BatchSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

/**
 * OpenTelemetry traces, exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set and off
 * otherwise. One trace follows a request from the API through Temporal (the SDK's interceptors
 * carry the context in workflow and activity headers) into each node's activity, its outbound
 * HTTP call and its SQL. The provider is process-wide, installed once.
 */
export interface Tracing {
  enabled: boolean;
  /** What workflow code's spans are exported through (the worker's sink), batched, when enabled. */
  workflowSpans?: SpanProcessor;
  resource?: Resource;
  /** Flushes what is buffered (at shutdown). */
  flush(): Promise<void>;
}

/** The name of the service's own tracer. */
export const TRACER = 'workflow-svc';
let installed: Tracing | undefined;

/** Installs the process's tracer provider once; later calls answer the first installation. */
export function installTracing(options: { endpoint?: string | undefined; serviceName: string; role: string }): Tracing {
  if (installed) return installed;
  if (!options.endpoint) {
    installed = { enabled: false, flush: async () => undefined };
    return installed;
  }
  const resource = new Resource({ 'service.name': options.serviceName, 'service.namespace': 'workflow-svc', 'svc.role': options.role });
  // The endpoint is the collector's base address; traces go to its standard path.
  const exporter = new OTLPTraceExporter({ url: `${options.endpoint.replace(/\/+$/, '')}/v1/traces` });
  const provider = new NodeTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1000 })] });
  // Registers the W3C trace-context propagator and an AsyncLocalStorage context manager.
  provider.register();
  const workflowSpans = new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1000 });
  installed = {
    enabled: true,
    workflowSpans,
    resource,
    flush: async () => {
      await Promise.all([provider.forceFlush(), workflowSpans.forceFlush()]);
    },
  };
  return installed;
}

/** Tracing is on and the calling code runs inside a span: a child span would be recorded. */
export function tracingActive(): boolean {
  return installed?.enabled === true && trace.getActiveSpan() !== undefined;
}

/** The trace the calling code runs in, when tracing is on and a span is active. */
export function currentTraceId(): string | undefined {
  return traceFields().trace_id;
}

/** Fields a log line carries to be found from its trace: `trace_id` and `span_id` of the active span. */
export function traceFields(): Record<string, string> {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const { traceId, spanId } = span.spanContext();
  return /^0+$/.test(traceId) ? {} : { trace_id: traceId, span_id: spanId };
}

/**
 * Runs `work` in a child span of the active context; the span ends with the work, recording a
 * thrown error. Without a provider the API's no-op tracer makes this almost free.
 */
export async function inSpan<T>(name: string, attributes: Attributes, work: (span: Span) => Promise<T>, kind: SpanKind = SpanKind.INTERNAL): Promise<T> {
  const tracer = trace.getTracer(TRACER);
  return tracer.startActiveSpan(name, { kind, attributes }, async (span) => {
    try {
      return await work(span);
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** Extracts a caller's trace context from request headers (W3C `traceparent`). */
export function contextFromHeaders(headers: Record<string, string | string[] | undefined>) {
  return propagation.extract(context.active(), headers);
}

export { SpanKind, SpanStatusCode, context, trace };
export type { Span };
