import { Inject, Injectable, OnModuleDestroy } from '@nestjs/common';
import type { Logger } from 'pino';
import { ReadsConfig } from '../config/sections/reads';
import { HttpProblem } from '../observability/http-error';
import { APP_LOGGER } from '../observability/logger';
import { MetricsService } from '../observability/metrics.service';
import { OUTAGE_RETRY_AFTER_SECONDS } from '../otlp/retry-after';
import type { ReadOutcome, ReadTask } from './read-answers';
import { DAY_MS, FieldProblem, MAX_RUNNERS_ADDED, parseId, parseRef, parseTags, parseWindow, ReadWindow, single } from './reads-request';
import { loadPrices, Prices } from '../across/prices';
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
    private readonly metrics: MetricsService,
  ) {
    this.prices = config.runnerPricesFile === undefined ? null : loadPrices(config.runnerPricesFile);
  }

  /** RUNNER_PRICES_FILE, read once at start: a bad file stops the service rather than pricing nothing. */
  private readonly prices: Prices | null;

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

  /** SPEC §13: the pipeline against `baseline`, or against the median of its ref's last 20 ended pipelines before it. */
  compare(params: Params, query: Query): Promise<Buffer> {
    const problems: FieldProblem[] = [];
    const projectId = parseId(params.project_id, 'project_id', problems);
    const pipelineId = parseId(params.pipeline_id, 'pipeline_id', problems);
    const baseline = query.baseline === undefined ? null : parseId(single(query.baseline, 'baseline', problems), 'baseline', problems);
    const window = parseWindow(query, Date.now(), this.config.lookbackDays, problems);
    refuse(problems);
    return this.answer('pipeline compare', {
      read: 'compare',
      projectId,
      pipelineId,
      baselineId: baseline,
      window: window.window,
      lookbackMs: this.config.lookbackDays * DAY_MS,
    });
  }

  regressions(params: Params, query: Query): Promise<Buffer> {
    const { projectId, window } = this.projectWindow(params, query);
    const problems: FieldProblem[] = [];
    const ref = parseRef(query.ref, problems);
    refuse(problems);
    return this.answer('regressions', { read: 'regressions', projectId, window: window.asked, ref: ref ?? null });
  }

  waste(params: Params, query: Query): Promise<Buffer> {
    const { projectId, window } = this.projectWindow(params, query);
    return this.answer('waste', { read: 'waste', projectId, window: window.asked, prices: this.prices });
  }

  runnerQueue(params: Params, query: Query): Promise<Buffer> {
    const { projectId, window } = this.projectWindow(params, query);
    return this.answer('runner queue', { read: 'runner_queue', projectId, window: window.asked });
  }

  /** The what-if's JSON body: `{ tags, runners, from?, to? }`, each field checked as a query's would be. */
  whatIf(params: Params, body: unknown): Promise<Buffer> {
    const problems: FieldProblem[] = [];
    const projectId = parseId(params.project_id, 'project_id', problems);
    const fields = (typeof body === 'object' && body !== null && !Array.isArray(body) ? body : {}) as Record<string, unknown>;
    if (fields !== body) problems.push({ field: 'body', problems: ['the body must be a JSON object: { "tags": "docker,arm64", "runners": 2 }'] });
    const tags = parseTags(fields.tags, problems);
    const runners = fields.runners;
    if (typeof runners !== 'number' || !Number.isInteger(runners) || Math.abs(runners) > MAX_RUNNERS_ADDED) {
      problems.push({ field: 'runners', problems: [`runners must be a whole number of runners to add, from -${MAX_RUNNERS_ADDED} to ${MAX_RUNNERS_ADDED}`] });
    }
    const window = parseWindow(fields, Date.now(), this.config.lookbackDays, problems);
    refuse(problems);
    return this.answer('runner what-if', { read: 'what_if', projectId, window: window.asked, tags, runners: runners as number });
  }

  private projectWindow(params: Params, query: Query): { projectId: number; window: ReadWindow } {
    const problems: FieldProblem[] = [];
    const projectId = parseId(params.project_id, 'project_id', problems);
    const window = parseWindow(query, Date.now(), this.config.lookbackDays, problems);
    refuse(problems);
    return { projectId, window };
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
      this.metrics.systemError('reads', 'backend_unavailable');
      throw new HttpProblem(503, 'the trace store did not answer in time; try again later', { retryAfterSeconds });
    }
    if (outcome.kind === 'not_found') throw new HttpProblem(404, `no ${outcome.what} of this project`);
    if (outcome.kind === 'unanswerable') throw new HttpProblem(422, outcome.reason);
    return Buffer.from(outcome.body.buffer, outcome.body.byteOffset, outcome.body.byteLength);
  }
}

function refuse(problems: readonly FieldProblem[]): void {
  if (problems.length === 0) return;
  throw new HttpProblem(400, `invalid request: ${problems.flatMap((problem) => problem.problems).join('; ')}`, { details: { fields: problems } });
}
