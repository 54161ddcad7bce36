import { FinishedJob } from './pipeline-events';
import { ActiveRuns, OTHER, PipelineNames, runEndOf, runStateOf } from './pipeline-runs';

const CREATED = Date.UTC(2026, 11, 7, 12, 0, 0);
const s = (seconds: number) => CREATED + seconds * 1000;
const end = (status: string, finishedAt: number) => ({ status, createdAt: CREATED, finishedAt: s(finishedAt) });
const ran = (jobId: number, startedAt: number, finishedAt: number, more: Partial<FinishedJob> = {}): FinishedJob => ({
  jobId,
  pipelineId: 1,
  status: 'success',
  startedAt: s(startedAt),
  finishedAt: s(finishedAt),
  ...more,
});

/** The recording rules of the CI/CD metrics (SPEC §14), as an operator reads their values. */
describe('pipeline runs as the CI/CD metrics record them', () => {
  it('takes a run whose jobs never started (canceled while pending) as pending throughout, with its result there', () => {
    const never: FinishedJob = { jobId: 2, pipelineId: 1, status: 'canceled', finishedAt: s(45) };
    expect(runEndOf(end('canceled', 45), [never])).toEqual({
      result: 'cancellation',
      states: [{ state: 'pending', seconds: 45, result: 'cancellation' }],
    });
  });

  it("counts pending from creation to the first job to start, whichever finished first, and splits it with that job's queue wait", () => {
    const late = ran(2, 40, 50);
    const first = ran(3, 12, 100, { queuedDuration: 4 });
    expect(runEndOf(end('success', 100), [late, first])).toEqual({
      result: 'success',
      states: [
        { state: 'pending', seconds: 12 },
        { state: 'executing', seconds: 88, result: 'success' },
      ],
      pendingParts: { gitlabDelay: 8, queueWait: 4 },
    });
  });

  it("never lets a failure reason that is not one of GitLab's words into error.type", () => {
    const odd = ran(2, 1, 9, { status: 'failed', failureReason: 'build: script failed for user@example.com' });
    expect(runEndOf(end('failed', 9), [odd])).toMatchObject({ result: 'failure', errorType: OTHER });
    expect(runEndOf(end('failed', 9), [])).toMatchObject({ result: 'failure', errorType: OTHER });
  });

  it("reads GitLab's unfinished statuses as the conventions' run states", () => {
    expect(['created', 'pending', 'waiting_for_resource', 'preparing', 'scheduled', 'manual', 'running', 'success'].map(runStateOf)).toEqual([
      'pending',
      'pending',
      'pending',
      'pending',
      'pending',
      'pending',
      'executing',
      undefined,
    ]);
  });

  it('keeps names to the cap, an already seen name still its own', () => {
    const names = new PipelineNames(1);
    expect(names.of({ projectId: 1, projectPath: 'a/b' })).toBe('a/b');
    expect(names.of({ projectId: 2, projectPath: 'c/d' })).toBe(OTHER);
    expect(names.of({ projectId: 1, projectPath: 'a/b' })).toBe('a/b');
    expect(new PipelineNames(5).of({ projectId: 3 })).toBe('project 3');
  });

  it('counts a run only while the store still holds the version this replica told, and forgets it after', () => {
    const runs = new ActiveRuns(10);
    runs.entered(1, 'a/b', 'pending', 1);
    runs.entered(2, 'a/b', 'executing', 2);
    // Pipeline 1 moved on elsewhere (another replica told it executing), pipeline 2 is as told.
    expect(runs.counted([1, 2], [2, 2])).toEqual(new Map([['a/b', { pending: 0, executing: 1 }]]));
    expect(runs.pipelineIds()).toEqual([2]);
  });
});
