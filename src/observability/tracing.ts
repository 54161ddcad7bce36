import { Attributes, SpanStatusCode, trace } from '@opentelemetry/api';

/**
 * Self-instrumentation (SPEC §8) through `@opentelemetry/api`. Without an SDK registered every span is
 * the API's non-recording span: creating and ending one is the only cost on the hot paths, and no
 * attribute work is done (attributes are a function, called only for a recording span).
 */
const tracer = trace.getTracer('ci-job-telemetry');

export interface DecisionSpan {
  /** Ends the span with the decision's outcome; a refusal or fault is an error status. */
  end(outcome: string, attributes?: () => Attributes, failed?: boolean): void;
}

export function startDecisionSpan(name: string): DecisionSpan {
  const span = tracer.startSpan(name);
  return {
    end: (outcome, attributes, failed = false) => {
      if (span.isRecording()) {
        span.setAttribute('ci_job_telemetry.outcome', outcome);
        if (attributes !== undefined) span.setAttributes(attributes());
        if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: outcome });
      }
      span.end();
    },
  };
}
