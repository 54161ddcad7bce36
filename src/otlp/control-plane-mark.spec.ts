import type { CollectedSpan } from './collected-spans';
import { CONTROL_PLANE_MARK, isReservedAttributeKey, keptVersionOf, trustedSpans } from './control-plane-mark';

const MARKED = { 'service.name': 'gitlab-ci', [CONTROL_PLANE_MARK.key]: CONTROL_PLANE_MARK.value };
const RUNNER = { 'service.name': 'runner' };

function span(name: string, spanId: string, resource: Record<string, string>, attributes: Record<string, string | number> = {}): CollectedSpan {
  return {
    traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
    spanId,
    parentSpanId: '',
    name,
    startNanos: 0n,
    endNanos: 1n,
    statusCode: 0,
    statusMessage: '',
    kind: 1,
    traceState: '',
    scopeName: '',
    attributes,
    resource,
  };
}

describe('the readers\' filter of the control plane\'s spans (SPEC §12 "Trust")', () => {
  it.each(['pipeline', 'bridge', 'job', 'queue_wait'])('takes a span named %s only from the control plane', (name) => {
    const spans = [span(name, '0000000000000001', MARKED), span(name, '0000000000000002', RUNNER)];

    expect(trustedSpans(spans).map((kept) => kept.spanId)).toEqual(['0000000000000001']);
  });

  it("drops a runner's copy of a control-plane span's id, whatever its name, and keeps the runner's own spans in order", () => {
    const spans = [
      span('job_execution', 'aaaaaaaaaaaaaaa1', RUNNER),
      span('job', '0000000000000001', MARKED),
      span('step_script', '0000000000000001', RUNNER),
      span('rspec', 'aaaaaaaaaaaaaaa2', RUNNER),
    ];

    expect(trustedSpans(spans).map((kept) => kept.name)).toEqual(['job_execution', 'job', 'rspec']);
  });

  it('ranks the control plane’s copy of a span id over any other, whatever version the other claims', () => {
    const forged = span('job', '0000000000000001', RUNNER, { 'ci.pipeline.span.version': 2 ** 53 - 1 });
    const first = span('job', '0000000000000001', MARKED);
    const later = span('job', '0000000000000001', MARKED, { 'ci.pipeline.span.version': 12 });

    expect(keptVersionOf(forged)).toBeLessThan(keptVersionOf(first));
    expect(keptVersionOf(first)).toBeLessThan(keptVersionOf(later));
  });

  it('reserves the keys readers trust and none of the runner’s own ci.* keys', () => {
    for (const key of [
      CONTROL_PLANE_MARK.key,
      'ci.pipeline.span.version',
      'ci.sampling.reason',
      'ci.job.critical_path',
      'ci.job.critical_path_seconds',
      'ci.job.slack_seconds',
      'ci.pipeline.critical_path.run_seconds',
      'ci.job.critical_path.wait_seconds',
      'ci.job.attempt',
      'ci.job.retried',
    ]) {
      expect([key, isReservedAttributeKey(key)]).toEqual([key, true]);
    }
    for (const key of ['ci.job.id', 'ci.job.status', 'ci.pipeline.id', 'ci.runner.executor', 'ci.job.stage', 'sampling.reason', 'http.method']) {
      expect([key, isReservedAttributeKey(key)]).toEqual([key, false]);
    }
  });
});
