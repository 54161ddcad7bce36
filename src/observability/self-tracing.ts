import { metrics, trace } from '@opentelemetry/api';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-proto';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';

/**
 * Registers an OpenTelemetry SDK for the service's own telemetry when an OTLP endpoint is configured (SPEC §8):
 * its spans, and the metrics it records through `@opentelemetry/api` (the CI/CD conventions' metrics, SPEC §14),
 * read every `metricExportIntervalMs`; otherwise nothing is registered and `@opentelemetry/api` stays a no-op. Spans
 * are batched and metrics read on a timer, so exporting never sits on a request's path. Returns what to call on
 * shutdown (which exports what is left).
 */
export function startSelfTracing(endpoint: string | undefined, serviceName: string, metricExportIntervalMs = 60_000): () => Promise<void> {
  if (endpoint === undefined) return async () => undefined;
  const base = endpoint.replace(/\/+$/, '');
  const resource = resourceFromAttributes({ 'service.name': serviceName });
  const tracerProvider = new BasicTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${base}/v1/traces` }))],
  });
  const meterProvider = new MeterProvider({
    resource,
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new OTLPMetricExporter({ url: `${base}/v1/metrics` }),
        exportIntervalMillis: metricExportIntervalMs,
        exportTimeoutMillis: Math.min(30_000, metricExportIntervalMs),
      }),
    ],
  });
  trace.setGlobalTracerProvider(tracerProvider);
  metrics.setGlobalMeterProvider(meterProvider);
  return async () => {
    await Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()]);
  };
}
