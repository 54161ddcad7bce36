import { PipelineTrace } from '../helpers/pipeline-trace';

const HOUR = 3_600_000;

/**
 * A pipeline of `jobs` jobs, each exporting `spansPerJob` spans from its programs (issue 56 item 3 tried 100 × 1,000:
 * about 30 MiB in the embedded collector), for the tests and the bench of reads that must not hold up a pickup.
 */
export function largePipeline(projectId: number, pipelineId: number, jobs: number, spansPerJob: number, createdAt = Date.now() - HOUR): PipelineTrace {
  const trace = new PipelineTrace(projectId, pipelineId, createdAt);
  for (let job = 0; job < jobs; job += 1) {
    const programSpans = Array.from({ length: spansPerJob }, (_, index) => ({
      name: `test ${index}`,
      attributes: { 'test.index': index, 'test.file': `spec/${job}_spec.rb` },
    }));
    trace.job({ jobId: pipelineId * 1000 + job, name: `job-${job}`, queuedAt: job, pickedUpAt: job + 1, finishedAt: job + 60, programSpans });
  }
  return trace.pipeline(pipelineId, { status: 'success', finishedAt: jobs + 61 });
}
