import type { JobEnd, PipelineEnd } from './pipeline-span-model';

/**
 * What GitLab's webhooks tell the control plane (SPEC §10 "Sources"), as src/gitlab-webhooks parses them from
 * `Pipeline Hook` and `Job Hook` payloads: the facts the span model and outcome sampling take in.
 */

export interface FinishedJob extends JobEnd {
  readonly jobId: number;
  readonly pipelineId: number;
}

export interface PipelineEvent {
  readonly kind: 'pipeline';
  readonly pipelineId: number;
  readonly projectId: number;
  readonly rootPipelineId?: number;
  /** The trigger job and pipeline of a child pipeline. */
  readonly source?: { readonly pipelineId: number; readonly jobId?: number; readonly projectId?: number };
  /** Set once the pipeline has finished. */
  readonly end?: PipelineEnd;
  /** Jobs of the pipeline that have finished, as its `builds` list says. */
  readonly finishedJobs: FinishedJob[];
  /** Jobs of the pipeline GitLab will still run (created, pending, running, …), as its `builds` list says. */
  readonly activeJobIds: number[];
}

export interface JobEvent {
  readonly kind: 'job';
  readonly job?: FinishedJob;
  readonly jobId: number;
}

export type WebhookEvent = PipelineEvent | JobEvent;
