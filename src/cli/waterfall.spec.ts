import { PipelineTrace } from '../../test/helpers/pipeline-trace';
import { criticalPath } from '../critical-path/critical-path';
import { criticalPathMarks, renderWaterfall, whereTheTimeWent } from './waterfall';

describe('`npm run -s trace` and the critical path (SPEC §12)', () => {
  const trace = new PipelineTrace(7, 500)
    .job({
      jobId: 1,
      name: 'build',
      queuedAt: 0,
      pickedUpAt: 4,
      finishedAt: 61,
      stages: [
        ['get_sources', 6],
        ['restore_cache', 21],
        ['step_script', 30],
      ],
    })
    .job({ jobId: 2, name: 'test', queuedAt: 62, pickedUpAt: 100, finishedAt: 170 })
    .job({ jobId: 3, name: 'lint', stage: 'test', queuedAt: 62, pickedUpAt: 63, finishedAt: 80 })
    .job({ jobId: 4, name: 'deploy', manual: true, queuedAt: 600, pickedUpAt: 601, finishedAt: 611 })
    .pipeline(500, { status: 'success', finishedAt: 612 });
  const spans = trace.spans();
  const path = criticalPath(spans)!;

  it('marks each job on the path and names its blocker; a job off it is not marked', () => {
    const rows = renderWaterfall(spans, criticalPathMarks(spans, path));
    const row = (label: RegExp) => rows.find((candidate) => label.test(candidate))!;
    expect(row(/^ {2}job 1 build/)).toMatch(/◀ critical path$/);
    expect(row(/^ {2}job 2 test/)).toMatch(/◀ critical path, after job 1 build$/);
    expect(row(/^ {2}job 4 deploy/)).toMatch(/◀ critical path, after job 2 test, played by hand$/);
    expect(row(/^ {2}job 3 lint/)).not.toMatch(/critical/);
  });

  it('ends with where the time went, most first, a manual wait named as such', () => {
    expect(whereTheTimeWent(path, true)).toBe(
      'on the critical path (10m 11s): 7m 10s waiting for manual jobs to be played, 1m 50s in scripts, 43s waiting for runners, 21s restoring caches, 6s getting sources, 1s waiting for GitLab to start jobs',
    );
    expect(whereTheTimeWent(path, false)).toMatch(/^on the critical path \(10m 11s so far, the pipeline is still running\): /);
  });
});
