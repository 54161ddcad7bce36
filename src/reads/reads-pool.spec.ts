import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { localCollectorDirectory } from '../collector/collector-files';
import { readsWorld, writeCollectorFiles } from '../../test/helpers/reads-cases';
import { largePipeline } from '../../test/suites/large-pipeline';
import type { ReadTask } from './read-answers';
import { ReadsPool } from './reads-pool';
import { ReadsUnavailableError } from './trace-reads';

/**
 * The reads pool (issue 56 item 3): reads in worker threads, and a read past its deadline abandoned with its thread.
 * Under ts-jest a thread compiles its TypeScript when it starts (seconds), so reads that must be answered get a long
 * deadline; the built service's threads start in milliseconds.
 */
describe('the reads pool', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cjt-pool-'));
  const world = readsWorld();
  const large = largePipeline(7, 600, 20, 1000);
  writeCollectorFiles(dataDir, [...world.exports, ...large.resourceSpans()]);
  const always = { fromMs: 0, toMs: Date.now() + 3_600_000 };
  const small: ReadTask = { read: 'critical_path', projectId: 7, pipelineId: 500, window: always };
  const huge: ReadTask = { read: 'pipeline_trace', projectId: 7, pipelineId: 600, window: always, maxSpans: 1_000_000 };
  const LONG = 120_000;
  let pool: ReadsPool;

  beforeEach(() => {
    pool = new ReadsPool({ backend: { kind: 'files', directory: localCollectorDirectory(dataDir) }, timeoutMs: LONG, size: 1 });
  });
  afterEach(() => pool.close());

  it(
    'answers reads in a worker thread, encoded, and 404s what the project does not have',
    async () => {
      const answer = await pool.run(small);
      expect(answer.kind).toBe('answer');
      expect(JSON.parse(Buffer.from(answer.kind === 'answer' ? answer.body : []).toString())).toMatchObject({ final: true, duration_seconds: 230 });
      expect(await pool.run({ ...small, projectId: 8 })).toEqual({ kind: 'not_found', what: 'pipeline' });
    },
    LONG,
  );

  it(
    'abandons a read past its deadline: its thread is terminated and replaced, and the next read is answered',
    async () => {
      await pool.run(small);
      const late = await pool.run(huge, 20).catch((error: unknown) => error);
      expect(late).toBeInstanceOf(ReadsUnavailableError);
      expect(pool.stats()).toMatchObject({ abandoned: 1, busy: 0 });
      expect((await pool.run(small)).kind).toBe('answer');
      expect(pool.stats()).toMatchObject({ threads: 1, abandoned: 1 });
    },
    LONG,
  );

  it(
    'fails the reads waiting when a thread cannot start its backend, instead of starting it again and again',
    async () => {
      const broken = new ReadsPool({ backend: { kind: 'clickhouse', options: { url: 'not a url', timeoutMs: 1000 } }, timeoutMs: LONG, size: 1 });
      try {
        await expect(broken.run(small)).rejects.toThrow(ReadsUnavailableError);
      } finally {
        await broken.close();
      }
    },
    LONG,
  );
});
