import { OutboxSpan, TracedJob, TracedWorkStore, tracedPipelineOf } from '../../src/traced-work/traced-work';
import { StoreWorld, testTracedJob } from './store-world';

/** One behaviour, every traced-work store (SPEC §10): traced pipelines, pipeline span versions and runner ends, and the span outbox. */
export function behavesAsATracedWorkStore(world: StoreWorld) {
  describe(`${world.name} traced-work store`, () => {
    let tracedWork: TracedWorkStore;
    beforeEach(async () => ({ tracedWork } = await world.open()));
    afterEach(() => world.close());

    /** A pickup's pipelines as the pipeline-spans service writes them: the job's own and its root. */
    const pipelinesOf = (job: TracedJob, ttlMs: number) =>
      [...new Set([job.pipelineId, job.rootPipelineId])].map((id) => ({ value: tracedPipelineOf(job, id), ttlMs }));
    const outboxSpan = (spanId: string): OutboxSpan => ({ spanId, resourceSpans: `{"span":"${spanId}"}`, enqueuedAt: world.now() });
    const limits = { maxSpans: 3, rememberMs: 60_000 };

    it('remembers a traced pipeline and its root pipeline, and forgets them at the end', async () => {
      await tracedWork.recordTracedPipelines(pipelinesOf(testTracedJob(), 300));
      const pipeline = { rootPipelineId: 500, projectId: 7, traceId: 'a'.repeat(32), tracestate: 'ot=th:c' };
      expect(await tracedWork.findTracedPipeline(501)).toEqual({ pipelineId: 501, ...pipeline });
      expect(await tracedWork.findTracedPipeline(500)).toEqual({ pipelineId: 500, ...pipeline });
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

    it("keeps a pipeline span's highest version whatever order versions come in, and says when one is stale", async () => {
      const [older, newer] = [(2 ** 40 + 5) * 1024, (2 ** 40 + 9) * 1024 + 130];
      expect(await tracedWork.raisePipelineSpanVersion(501, older, 60_000)).toBe(older);
      expect(await tracedWork.raisePipelineSpanVersion(501, newer, 60_000)).toBe(newer);
      expect(await tracedWork.raisePipelineSpanVersion(501, older, 60_000)).toBe(newer);
      expect(await tracedWork.raisePipelineSpanVersion(501, newer, 60_000)).toBe(newer);
      expect(await tracedWork.raisePipelineSpanVersion(502, older, 60_000)).toBe(older);
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

    it('enqueues each span id once, refuses what does not fit, and says which was which', async () => {
      expect(await tracedWork.enqueueSpans([outboxSpan('01'), outboxSpan('02'), outboxSpan('01')], limits)).toEqual({ queued: 2, duplicates: 1, refused: 0 });
      expect(await tracedWork.enqueueSpans([outboxSpan('02'), outboxSpan('03'), outboxSpan('04')], limits)).toEqual({ queued: 1, duplicates: 1, refused: 1 });
      expect((await tracedWork.outboxDepth()).spans).toBe(3);
      // Refused is not remembered: once there is room, the same span is taken.
      const claimed = await tracedWork.claimSpans(10, 60_000);
      await tracedWork.acknowledgeSpans(claimed.map((span) => span.spanId));
      expect(await tracedWork.enqueueSpans([outboxSpan('04'), outboxSpan('01')], limits)).toEqual({ queued: 1, duplicates: 1, refused: 0 });
    });

    it('hands each due span to one claimer only until its lease runs out, and forgets it once acknowledged', async () => {
      await tracedWork.enqueueSpans([outboxSpan('0a'), outboxSpan('0b')], limits);
      const first = await tracedWork.claimSpans(10, 300);
      expect(first.map((span) => [span.spanId, span.resourceSpans, span.attempts])).toEqual([
        ['0a', '{"span":"0a"}', 0],
        ['0b', '{"span":"0b"}', 0],
      ]);
      expect(await tracedWork.claimSpans(10, 300)).toEqual([]);
      await tracedWork.acknowledgeSpans(['0a']);
      await world.elapse(400);
      // The claimer of 0b died: its lease ran out and the span is due again.
      expect((await tracedWork.claimSpans(10, 300)).map((span) => span.spanId)).toEqual(['0b']);
      expect(await tracedWork.outboxDepth()).toEqual({ spans: 1, oldestEnqueuedAt: expect.any(Number) });
    });

    it('puts a span whose delivery failed back for later, counting the attempt', async () => {
      await tracedWork.enqueueSpans([outboxSpan('0c')], limits);
      const [claimed] = await tracedWork.claimSpans(10, 60_000);
      await tracedWork.retrySpans([claimed.spanId], 200);
      expect(await tracedWork.claimSpans(10, 60_000)).toEqual([]);
      await world.elapse(300);
      expect((await tracedWork.claimSpans(10, 60_000)).map((span) => [span.spanId, span.attempts])).toEqual([['0c', 1]]);
      // Acknowledged meanwhile by another replica: a late retry does not bring it back.
      await tracedWork.acknowledgeSpans(['0c']);
      await tracedWork.retrySpans(['0c'], 0);
      expect(await tracedWork.claimSpans(10, 60_000)).toEqual([]);
      expect(await tracedWork.outboxDepth()).toEqual({ spans: 0 });
    });
  });
}
