import { PipelineTrace } from '../../test/helpers/pipeline-trace';
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
});
