import { Inject, Injectable, OnModuleDestroy } from '@nestjs/common';
import type { Logger } from 'pino';
import { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.constants';
import { HttpProblem } from '../observability/http-error';
import { APP_LOGGER } from '../observability/logger';
import { OUTAGE_RETRY_AFTER_SECONDS } from '../observability/retry-after';
import { withTimeout } from '../observability/with-timeout';
import { Completeness, completenessOf } from './completeness';
import { CriticalPath, criticalPath, emptyTotals } from '../critical-path/critical-path';
import { JobSummary, summarizeJobs } from './job-summary';
import { FieldProblem, parseId, parseRef, parseWindow, ReadWindow } from './reads-request';
import { TRACE_READS } from './reads.constants';
import { jobSubtree, ofProject, tracesData } from './trace-selection';
import { ReadsUnavailableError, StoredSpan, TraceReads } from './trace-reads';
import { trustedSpans } from '../otlp/control-plane-mark';

export type Query = Record<string, unknown>;
export type Params = Record<string, unknown>;

export interface TraceAnswer {
  readonly trace: { resourceSpans: unknown[] };
  readonly completeness: Completeness;
}

export interface CriticalPathAnswer extends CriticalPath {
  readonly final: boolean;
}

export interface JobsAnswer {
  readonly from: string;
  readonly to: string;
  readonly ref: string | null;
  readonly jobs: JobSummary[];
}

const NOT_FOUND = (what: string) => new HttpProblem(404, `no ${what} of this project`);

/**
 * SPEC §12: the reads GitLab makes on a user's behalf, after it decided the user may see the project. Everything
 * is checked before the backend is asked (400 naming each bad field); a pipeline or job of another project is
 * 404 exactly as one that does not exist; the backend is given at most READS_TIMEOUT_MS, then the answer is 503
 * with Retry-After, whatever it goes on doing. Completeness and the critical path are computed here, one way for
 * both backends.
 */
@Injectable()
export class ReadsService implements OnModuleDestroy {
  constructor(
    @Inject(TRACE_READS) private readonly reads: TraceReads,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(APP_LOGGER) private readonly logger: Logger,
  ) {}

  async onModuleDestroy(): Promise<void> {
    await this.reads.close?.();
  }

  async pipelineTrace(params: Params, query: Query): Promise<TraceAnswer> {
    const { projectId, id, window } = this.request(params, query, 'pipeline_id');
    const spans = await this.pipelineSpans(projectId, id, window);
    return { trace: tracesData(spans), completeness: completenessOf(spans) };
  }

  async jobTrace(params: Params, query: Query): Promise<TraceAnswer> {
    const { projectId, id, window } = this.request(params, query, 'job_id');
    const spans = await this.fetch('job trace', () => this.reads.jobTrace(projectId, id, window.window));
    const job = spans === null ? null : jobSubtree(ofProject(trustedSpans(spans), projectId), id);
    if (job === null) throw NOT_FOUND('job');
    const completeness = completenessOf(job.spans);
    // The job span's own parent (its pipeline's span) is outside a job's read by design, not missing.
    const outside = job.spans.some((span) => span.spanId === job.jobSpanId) ? 1 : 0;
    return {
      trace: tracesData(job.spans),
      completeness: {
        ...completeness,
        missing_parents: completeness.missing_parents - outside,
        final: job.closed && completeness.missing_parents - outside === 0,
      },
    };
  }

  async criticalPath(params: Params, query: Query): Promise<CriticalPathAnswer> {
    const { projectId, id, window } = this.request(params, query, 'pipeline_id');
    const spans = await this.pipelineSpans(projectId, id, window);
    const path = criticalPath(spans);
    const final = completenessOf(spans).final;
    if (path === null) return { duration_seconds: 0, final, totals: emptyTotals(), path: [], slack: [] };
    return { duration_seconds: path.duration_seconds, final, totals: path.totals, path: path.path, slack: path.slack };
  }

  async jobs(params: Params, query: Query): Promise<JobsAnswer> {
    const problems: FieldProblem[] = [];
    const projectId = parseId(params.project_id, 'project_id', problems);
    const window = parseWindow(query, Date.now(), this.config.READS_LOOKBACK_DAYS, problems);
    const ref = parseRef(query.ref, problems);
    refuse(problems);
    const runs = await this.fetch('project jobs', () => this.reads.projectJobs(projectId, window.asked, ref));
    return {
      from: new Date(window.asked.fromMs).toISOString(),
      to: new Date(window.asked.toMs).toISOString(),
      ref: ref ?? null,
      jobs: summarizeJobs(runs),
    };
  }

  private request(params: Params, query: Query, idField: 'pipeline_id' | 'job_id'): { projectId: number; id: number; window: ReadWindow } {
    const problems: FieldProblem[] = [];
    const projectId = parseId(params.project_id, 'project_id', problems);
    const id = parseId(params[idField], idField, problems);
    const window = parseWindow(query, Date.now(), this.config.READS_LOOKBACK_DAYS, problems);
    refuse(problems);
    return { projectId, id, window };
  }

  private async pipelineSpans(projectId: number, pipelineId: number, window: ReadWindow): Promise<StoredSpan[]> {
    const spans = await this.fetch('pipeline trace', () => this.reads.pipelineTrace(projectId, pipelineId, window.window));
    // SPEC §12 "Trust": GitLab's account of a job or pipeline only from the control plane's own spans.
    const own = spans === null ? [] : ofProject(trustedSpans(spans), projectId);
    if (own.length === 0) throw NOT_FOUND('pipeline');
    return own;
  }

  /** The backend's answer within READS_TIMEOUT_MS; a failure or a late answer is 503 with Retry-After, never a 500 or a hang. */
  private async fetch<T>(what: string, read: () => Promise<T>): Promise<T> {
    try {
      return await withTimeout(read, this.config.READS_TIMEOUT_MS);
    } catch (error) {
      const retryAfterSeconds = error instanceof ReadsUnavailableError ? Math.max(1, Math.ceil(error.retryAfterSeconds)) : OUTAGE_RETRY_AFTER_SECONDS;
      this.logger.warn(`${what}: the trace store did not answer: ${(error as Error).message}`);
      throw new HttpProblem(503, 'the trace store did not answer in time; try again later', { retryAfterSeconds });
    }
  }
}

function refuse(problems: readonly FieldProblem[]): void {
  if (problems.length === 0) return;
  throw new HttpProblem(400, `invalid request: ${problems.flatMap((problem) => problem.problems).join('; ')}`, { details: { fields: problems } });
}
