import { Inject, Injectable, OnModuleDestroy } from '@nestjs/common';
import type { Logger } from 'pino';
import { ReadsConfig } from '../config/sections/reads';
import { HttpProblem } from '../observability/http-error';
import { APP_LOGGER } from '../observability/logger';
import { OUTAGE_RETRY_AFTER_SECONDS } from '../otlp/retry-after';
import type { ReadOutcome, ReadTask } from './read-answers';
import { FieldProblem, parseId, parseRef, parseWindow, ReadWindow } from './reads-request';
import type { ReadsRunner } from './reads-pool';
import { READS_RUNNER } from './reads.constants';
import { ReadsUnavailableError } from './trace-reads';

export type Query = Record<string, unknown>;
export type Params = Record<string, unknown>;

/**
 * SPEC §12: the reads GitLab makes on a user's behalf, after it decided the user may see the project. Everything
 * is checked here before any backend is asked (400 naming each bad field); the rest (the backend's lookups,
 * completeness, the critical path, the answer's JSON) is done by the runner, in a worker thread (src/reads/reads-pool.ts),
 * within READS_TIMEOUT_MS: past it, or when the backend fails, the answer is 503 with Retry-After and the read is
 * abandoned. A pipeline or job of another project is 404 exactly as one that does not exist. Answers come back
 * encoded, and are sent as they are.
 */
@Injectable()
export class ReadsService implements OnModuleDestroy {
  constructor(
    @Inject(READS_RUNNER) private readonly runner: ReadsRunner,
    private readonly config: ReadsConfig,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  async onModuleDestroy(): Promise<void> {
    await this.runner.close();
  }

  pipelineTrace(params: Params, query: Query): Promise<Buffer> {
    const { projectId, id, window } = this.request(params, query, 'pipeline_id');
    return this.answer('pipeline trace', { read: 'pipeline_trace', projectId, pipelineId: id, window: window.window, maxSpans: this.config.maxSpans });
  }

  jobTrace(params: Params, query: Query): Promise<Buffer> {
    const { projectId, id, window } = this.request(params, query, 'job_id');
    return this.answer('job trace', { read: 'job_trace', projectId, jobId: id, window: window.window, maxSpans: this.config.maxSpans });
  }

  criticalPath(params: Params, query: Query): Promise<Buffer> {
    const { projectId, id, window } = this.request(params, query, 'pipeline_id');
    return this.answer('critical path', { read: 'critical_path', projectId, pipelineId: id, window: window.window });
  }

  jobs(params: Params, query: Query): Promise<Buffer> {
    const problems: FieldProblem[] = [];
    const projectId = parseId(params.project_id, 'project_id', problems);
    const window = parseWindow(query, Date.now(), this.config.lookbackDays, problems);
    const ref = parseRef(query.ref, problems);
    refuse(problems);
    return this.answer('project jobs', { read: 'jobs', projectId, window: window.asked, ref: ref ?? null });
  }

  private request(params: Params, query: Query, idField: 'pipeline_id' | 'job_id'): { projectId: number; id: number; window: ReadWindow } {
    const problems: FieldProblem[] = [];
    const projectId = parseId(params.project_id, 'project_id', problems);
    const id = parseId(params[idField], idField, problems);
    const window = parseWindow(query, Date.now(), this.config.lookbackDays, problems);
    refuse(problems);
    return { projectId, id, window };
  }

  /** The read's encoded answer; 404 when the project has no such pipeline or job; a failure or a late answer is 503 with Retry-After, never a 500 or a hang. */
  private async answer(what: string, task: ReadTask): Promise<Buffer> {
    let outcome: ReadOutcome;
    try {
      outcome = await this.runner.run(task);
    } catch (error) {
      const retryAfterSeconds = error instanceof ReadsUnavailableError ? Math.max(1, Math.ceil(error.retryAfterSeconds)) : OUTAGE_RETRY_AFTER_SECONDS;
      this.logger.warn(`${what}: the trace store did not answer: ${(error as Error).message}`);
      throw new HttpProblem(503, 'the trace store did not answer in time; try again later', { retryAfterSeconds });
    }
    if (outcome.kind === 'not_found') throw new HttpProblem(404, `no ${outcome.what} of this project`);
    return Buffer.from(outcome.body.buffer, outcome.body.byteOffset, outcome.body.byteLength);
  }
}

function refuse(problems: readonly FieldProblem[]): void {
  if (problems.length === 0) return;
  throw new HttpProblem(400, `invalid request: ${problems.flatMap((problem) => problem.problems).join('; ')}`, { details: { fields: problems } });
}
