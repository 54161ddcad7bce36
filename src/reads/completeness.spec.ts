import { PipelineTrace } from '../../test/helpers/pipeline-trace';
import { collectedSpans } from '../otlp/collected-spans';
import { pipelineSpanVersion, reopenedPipelineEnd, SPAN_VERSION_ATTRIBUTE } from '../pipeline-spans/pipeline-span-model';
import { completenessOf } from './completeness';

/** SPEC §12: how complete a trace read says it is. Times are seconds after the pipeline was created. */

const PROJECT = 7;

describe('the completeness of a trace (SPEC §12)', () => {
  it('a pipeline still running is not final, and its job spans wait for their pipeline span', () => {
    const trace = new PipelineTrace(PROJECT, 509)
      .job({ jobId: 90, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 91, name: 'test', queuedAt: 31, pickedUpAt: 33 });
    expect(completenessOf(trace.spans())).toMatchObject({ final: false, missing_parents: 2, roots: 0 });
  });

  it("counts a job whose runner's export never arrived", () => {
    const trace = new PipelineTrace(PROJECT, 510)
      .job({ jobId: 100, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .job({ jobId: 101, name: 'test', queuedAt: 31, pickedUpAt: 35, finishedAt: 60, stages: null })
      .pipeline(510, { status: 'success', finishedAt: 61 });
    expect(completenessOf(trace.spans())).toMatchObject({ jobs_without_runner_spans: 1, final: true, roots: 1, missing_parents: 0 });
  });

  it('says why a pipeline was kept and what it stands for: a 10 % head sample stands for 10', () => {
    const sampled = new PipelineTrace(PROJECT, 520, undefined, 'ot=th:e666666666666')
      .job({ jobId: 200, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 30 })
      .pipeline(520, { status: 'success', finishedAt: 31 });
    const completeness = completenessOf(sampled.spans());
    expect(completeness).toMatchObject({ spans: 5, roots: 1, missing_parents: 0, jobs_without_runner_spans: 0, final: true, sampling_reason: 'head' });
    expect(completeness.adjusted_count).toBeCloseTo(10, 6);

    const kept = new PipelineTrace(PROJECT, 521, undefined, 'ot=th:0').pipeline(521, { status: 'failed', finishedAt: 31 });
    expect(completenessOf(kept.spans()).adjusted_count).toBe(1);
  });

  describe('final only when every pipeline of the trace has ended (issue 56)', () => {
    it('4a: the root ended, its child (no strategy: depend) still runs: not final', () => {
      const trace = new PipelineTrace(PROJECT, 540)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .pipeline(540, { status: 'success', finishedAt: 20 })
        // The child's first job ended; its second is pending; GitLab's hook says the child is running.
        .job({ jobId: 60, name: 'child-build', pipelineId: 541, queuedAt: 11, pickedUpAt: 12, finishedAt: 18 });
      expect(completenessOf(trace.spans())).toMatchObject({ final: false, missing_parents: 1 });

      // The child's running span (its Pipeline Hook `running`) is there: nothing is missing, and still not final.
      const running = trace.pipelineSpan(541, { status: 'running', createdAt: 11, finishedAt: 18 });
      const withRunning = [...trace.spans(), ...collectedSpans({ resourceSpans: [running.resourceSpans] })];
      expect(completenessOf(withRunning)).toMatchObject({ final: false, missing_parents: 0, roots: 1 });
    });

    it('a child seen only through its bridge, whose pipeline span is not there, leaves the trace unfinished', () => {
      const trace = new PipelineTrace(PROJECT, 542)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .bridge(2, 542, 543, { createdAt: 11, finishedAt: 30 })
        .pipeline(542, { status: 'success', finishedAt: 31 });
      expect(completenessOf(trace.spans())).toMatchObject({ final: false, missing_parents: 0, roots: 1 });
      trace.pipeline(543, { status: 'success', createdAt: 11, finishedAt: 30 }, 2);
      expect(completenessOf(trace.spans())).toMatchObject({ final: true });
    });

    it("a multi-project downstream pipeline, its own project's trace, leaves its upstream's trace final once its bridge ended", () => {
      const trace = new PipelineTrace(PROJECT, 546)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .bridge(2, 546, 547, { createdAt: 11, finishedAt: 30 })
        .pipeline(546, { status: 'success', finishedAt: 31 });
      // The bridge points at project 8's pipeline 547 (GitLab's source_pipeline named another project), as hook-spans.ts draws it.
      const spans = trace
        .spans()
        .map((span) => (span.name === 'bridge' ? { ...span, attributes: { ...span.attributes, 'ci.downstream_project.id': PROJECT + 1 } } : span));
      expect(completenessOf(spans)).toMatchObject({ final: true, missing_parents: 0, roots: 1 });
    });

    it('4b: a failed pipeline reopened by a retried job is not final at once, before a runner takes the retry', () => {
      const trace = new PipelineTrace(PROJECT, 544).job({ jobId: 1, name: 'test', status: 'failed', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 });
      const failed = { status: 'failed', createdAt: trace.at(0), finishedAt: trace.at(11) };
      const before = [...trace.spans(), ...collectedSpans({ resourceSpans: [trace.pipelineSpan(544, { status: 'failed', finishedAt: 11 }).resourceSpans] })];
      expect(completenessOf(before)).toMatchObject({ final: true });

      // GitLab's Pipeline Hook says `running` (the retry is pending): the control plane draws the pipeline's span again,
      // a newer version, and a reader keeps it over the failed one.
      // Drawn with the end of the version it follows, its version is above that one's: the store lets it out.
      expect(pipelineSpanVersion({ ...failed, status: 'running' })).toBeGreaterThan(pipelineSpanVersion(failed));
      const reopened = reopenedPipelineEnd(failed, 'running');
      expect(pipelineSpanVersion(reopened)).toBeGreaterThan(pipelineSpanVersion(failed));
      expect(pipelineSpanVersion(reopened)).toBeLessThan(pipelineSpanVersion({ ...failed, status: 'success', finishedAt: trace.at(12) }));
      const span = trace.pipelineSpan(544, { status: 'running', finishedAt: 11 });
      const latest = [...trace.spans(), ...collectedSpans({ resourceSpans: [span.resourceSpans] })];
      expect(latest.find((found) => found.name === 'pipeline')!.attributes[SPAN_VERSION_ATTRIBUTE]).toBe(pipelineSpanVersion(reopened));
      expect(completenessOf(latest)).toMatchObject({ final: false, missing_parents: 0, roots: 1 });
    });

    it('two roots are not one whole trace', () => {
      const trace = new PipelineTrace(PROJECT, 546)
        .job({ jobId: 1, name: 'build', queuedAt: 0, pickedUpAt: 1, finishedAt: 10 })
        .pipeline(546, { status: 'success', finishedAt: 11 })
        .pipeline(546, { status: 'success', finishedAt: 11 });
      // A second pipeline span without a parent (a span of another id claiming the root's place).
      const spans = trace.spans();
      const twice = spans.map((span, i) => (i === spans.length - 1 ? { ...span, spanId: 'ffffffffffffffff' } : span));
      expect(completenessOf(twice)).toMatchObject({ roots: 2, final: false });
    });
  });
});
