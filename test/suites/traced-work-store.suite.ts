import { TracedJob, TracedWorkStore, tracedPipelineOf } from '../../src/traced-work/traced-work';
import { StoreWorld, testTracedJob } from './store-world';

/** One behaviour, every traced-work store (SPEC §10): traced pipelines, pipeline span versions and runner ends. */
export function behavesAsATracedWorkStore(world: StoreWorld) {
  describe(`${world.name} traced-work store`, () => {
    let tracedWork: TracedWorkStore;
    beforeEach(async () => ({ tracedWork } = await world.open()));
    afterEach(() => world.close());

    /** A pickup's pipelines as the pipeline-spans service writes them: the job's own and its root. */
    const pipelinesOf = (job: TracedJob, ttlMs: number) =>
      [...new Set([job.pipelineId, job.rootPipelineId])].map((id) => ({ value: tracedPipelineOf(job, id), ttlMs }));

    it('remembers a traced pipeline and its root pipeline, and forgets them at the end', async () => {
      await tracedWork.recordTracedPipelines(pipelinesOf(testTracedJob(), 300));
      const pipeline = { rootPipelineId: 500, projectId: 7, traceId: 'a'.repeat(32), tracestate: 'ot=th:c' };
      expect(await tracedWork.findTracedPipeline(501)).toEqual({ pipelineId: 501, ...pipeline });
      // The root, named by a job of its child: its project is the job's guess.
      expect(await tracedWork.findTracedPipeline(500)).toEqual({ pipelineId: 500, ...pipeline, asRoot: true });
      expect(await tracedWork.findTracedPipeline(502)).toBeNull();
      await world.elapse(450);
      expect(await tracedWork.findTracedPipeline(500)).toBeNull();
    });

    it('remembers every pipeline of a batch of pickups written in one call', async () => {
      const jobs = [
        testTracedJob({ jobId: 5001 }),
        testTracedJob({ jobId: 5002, pipelineId: 502 }),
        testTracedJob({ jobId: 5003, pipelineId: 503, rootPipelineId: 503 }),
      ];
      await tracedWork.recordTracedPipelines(jobs.flatMap((job) => pipelinesOf(job, 60_000)));
      for (const id of [500, 501, 502, 503]) expect((await tracedWork.findTracedPipeline(id))?.pipelineId).toBe(id);
      expect((await tracedWork.findTracedPipeline(503))?.rootPipelineId).toBe(503);
    });

    it('keeps a pipeline as long as its longest-lived job, whatever order the pickups come in', async () => {
      await tracedWork.recordTracedPipelines(pipelinesOf(testTracedJob({ jobId: 5001 }), 60_000));
      await tracedWork.recordTracedPipelines(pipelinesOf(testTracedJob({ jobId: 5002 }), 300));
      await world.elapse(450);
      expect(await tracedWork.findTracedPipeline(501)).not.toBeNull();
    });

    describe("one project's records (SPEC §12 Trust)", () => {
      // Project 8's pipeline 601 (a multi-project downstream) whose job names project 7's pipeline 500 as its root.
      const downstreamJob = testTracedJob({ jobId: 6001, pipelineId: 601, rootPipelineId: 500, projectId: 8, traceId: 'b'.repeat(32) });
      const ownRoot = testTracedJob({ jobId: 5000, pipelineId: 500, rootPipelineId: 500 });

      it("never lets a pickup naming another project's pipeline as its root rewrite that pipeline's record", async () => {
        await tracedWork.recordTracedPipelines(pipelinesOf(ownRoot, 60_000));
        await tracedWork.recordTracedPipelines(pipelinesOf(downstreamJob, 120_000));
        expect(await tracedWork.findTracedPipeline(500)).toEqual({
          pipelineId: 500,
          rootPipelineId: 500,
          projectId: 7,
          traceId: 'a'.repeat(32),
          tracestate: 'ot=th:c',
        });
        expect(await tracedWork.findTracedPipeline(601)).toMatchObject({ pipelineId: 601, projectId: 8 });
        // Written again and again (on every replica, after every memo), it still never takes the place.
        await tracedWork.recordTracedPipelines(pipelinesOf(downstreamJob, 120_000));
        expect((await tracedWork.findTracedPipeline(500))?.projectId).toBe(7);
      });

      it("lets a pipeline's own record take the place of another project's guess, and never the other way round", async () => {
        await tracedWork.recordTracedPipelines(pipelinesOf(downstreamJob, 60_000));
        expect(await tracedWork.findTracedPipeline(500)).toMatchObject({ projectId: 8, asRoot: true });
        await tracedWork.recordTracedPipelines(pipelinesOf(ownRoot, 60_000));
        const own = await tracedWork.findTracedPipeline(500);
        expect(own).toMatchObject({ projectId: 7, traceId: 'a'.repeat(32) });
        expect(own?.asRoot).toBeUndefined();
      });

      it("keeps a pipeline's own record when a job of its child names it as root, and lengthens its life", async () => {
        await tracedWork.recordTracedPipelines(pipelinesOf(ownRoot, 300));
        await tracedWork.recordTracedPipelines(pipelinesOf(testTracedJob(), 60_000));
        await world.elapse(450);
        const root = await tracedWork.findTracedPipeline(500);
        expect(root).toMatchObject({ projectId: 7 });
        expect(root?.asRoot).toBeUndefined();
      });
    });

    it("keeps a pipeline's latest end whatever order its ends come in, until it is forgotten", async () => {
      const ended = (finishedAt: number, finishedJobIds: number[]) => ({ place: { spanId: 'ab' }, end: { finishedAt, status: 'failed' }, finishedJobIds });
      expect(await tracedWork.pipelineEnd(501)).toBeNull();
      await tracedWork.recordPipelineEnd(501, ended(9_000, [1, 2]), 300);
      // An earlier end delivered late (a hook GitLab redelivered) does not take the later one's place.
      await tracedWork.recordPipelineEnd(501, ended(5_000, [1]), 300);
      expect(await tracedWork.pipelineEnd(501)).toEqual(ended(9_000, [1, 2]));
      await tracedWork.recordPipelineEnd(501, ended(12_000, [1, 2, 3]), 300);
      expect(await tracedWork.pipelineEnd(501)).toEqual(ended(12_000, [1, 2, 3]));
      expect(await tracedWork.pipelineEnd(502)).toBeNull();
      await world.elapse(450);
      expect(await tracedWork.pipelineEnd(501)).toBeNull();
    });

    it("keeps a pipeline span's highest version whatever order versions come in, and says when one is stale", async () => {
      const [older, newer] = [(2 ** 40 + 5) * 1024, (2 ** 40 + 9) * 1024 + 130];
      expect(await tracedWork.raisePipelineSpanVersion(501, older, 60_000)).toEqual({ before: 0, highest: older });
      expect(await tracedWork.raisePipelineSpanVersion(501, newer, 60_000)).toEqual({ before: older, highest: newer });
      expect(await tracedWork.raisePipelineSpanVersion(501, older, 60_000)).toEqual({ before: newer, highest: newer });
      // The same version again (a redelivered hook) raises nothing: only the first call told of it.
      expect(await tracedWork.raisePipelineSpanVersion(501, newer, 60_000)).toEqual({ before: newer, highest: newer });
      expect(await tracedWork.raisePipelineSpanVersion(502, older, 60_000)).toEqual({ before: 0, highest: older });
      expect(await tracedWork.highestPipelineSpanVersions([502, 503, 501])).toEqual([older, 0, newer]);
    });

    it("keeps each job's runner end once per pipeline and answers them all", async () => {
      const end = (jobId: number, finishedAt: number, status = 'success') => ({ jobId, queuedAt: 1_000 + jobId, finishedAt, status });
      expect(await tracedWork.recordRunnerJobEnd(501, end(1, 5_000), 60_000)).toEqual([end(1, 5_000)]);
      const both = await tracedWork.recordRunnerJobEnd(501, end(2, 9_000, 'failed'), 60_000);
      expect(both.sort((a, b) => a.jobId - b.jobId)).toEqual([end(1, 5_000), end(2, 9_000, 'failed')]);
      // Reported twice (two exports with its job_execution): still one job.
      expect(await tracedWork.recordRunnerJobEnd(501, end(2, 9_000, 'failed'), 60_000)).toHaveLength(2);
      expect(await tracedWork.recordRunnerJobEnd(500, end(3, 7_000), 60_000)).toEqual([end(3, 7_000)]);
    });

    it("keeps a root pipeline's story, one chapter per key, the latest told, until it is forgotten", async () => {
      expect(await tracedWork.traceStory(500)).toEqual([]);
      await tracedWork.recordTraceStory(500, [{ key: 'job:1', text: 'build ran' }], 300);
      await tracedWork.recordTraceStory(
        500,
        [
          { key: 'job:1', text: 'build ran, manual' },
          { key: 'bridge:600', text: 'child 600' },
        ],
        300,
      );
      await tracedWork.recordTraceStory(501, [{ key: 'job:1', text: 'another trace' }], 300);
      expect((await tracedWork.traceStory(500)).sort()).toEqual(['build ran, manual', 'child 600']);
      await world.elapse(450);
      expect(await tracedWork.traceStory(500)).toEqual([]);
    });

    it("keeps a root pipeline's first head decision, whatever later pickups propose (a rate change mid-pipeline)", async () => {
      const first = { samplingPercent: 10, outcomePolicy: { keepStatuses: ['failed'], whenNoOutcome: 'keep' as const } };
      expect(await tracedWork.pinHeadDecision(500, first, 60_000)).toEqual(first);
      expect(await tracedWork.pinHeadDecision(500, { samplingPercent: 100 }, 60_000)).toEqual(first);
      expect(await tracedWork.pinHeadDecision(600, { samplingPercent: 100 }, 60_000)).toEqual({ samplingPercent: 100 });
      // Forgotten with the pipeline: a root pipeline id is never reused, but its memory ends.
      expect(await tracedWork.pinHeadDecision(700, { samplingPercent: 10 }, 300)).toEqual({ samplingPercent: 10 });
      await world.elapse(450);
      expect(await tracedWork.pinHeadDecision(700, { samplingPercent: 50 }, 300)).toEqual({ samplingPercent: 50 });
    });
  });
}
