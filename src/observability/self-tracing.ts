import { trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';

/**
 * Registers an OpenTelemetry SDK for the service's own spans when an OTLP endpoint is configured
 * (SPEC §8); otherwise nothing is registered and `@opentelemetry/api` stays a no-op. Spans are
 * batched, so exporting never sits on a request's path. Returns what to call on shutdown.
 */
export function startSelfTracing(endpoint: string | undefined, serviceName: string): () => Promise<void> {
  if (endpoint === undefined) return async () => undefined;
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${endpoint.replace(/\/+$/, '')}/v1/traces` }))],
  });
  trace.setGlobalTracerProvider(provider);
  return () => provider.shutdown();
}
