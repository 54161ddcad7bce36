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
  /** GitLab's `project.path_with_namespace`: the CI/CD metrics' `cicd.pipeline.name` (pipeline-runs.ts). */
  readonly projectPath?: string;
  readonly rootPipelineId?: number;
  /** The trigger job and pipeline of a child pipeline. */
  readonly source?: { readonly pipelineId: number; readonly jobId?: number; readonly projectId?: number };
  /**
   * GitLab's status of the pipeline (`object_attributes.status`). One not finished (`running`, `pending`, …) after a
   * finished one reopens the pipeline (a retry, a manual job played): its span follows (reopenedPipelineEnd).
   */
  readonly status?: string;
  /** GitLab's `created_at` of the pipeline, whatever its status (a reopened pipeline's span starts there). */
  readonly createdAt?: number;
  /** Set once the pipeline has finished. */
  readonly end?: PipelineEnd;
  /** Jobs of the pipeline that have finished, as its `builds` list says. */
  readonly finishedJobs: FinishedJob[];
  /** Jobs of the pipeline GitLab will still run (created, pending, running, …), as its `builds` list says. */
  readonly activeJobIds: number[];
  /**
   * Jobs the `builds` list says are `waiting_for_resource` (their `resource_group` held): to remember until they end,
   * as their job span's `waitedForResource` (no hook at a job's end says it).
   */
  readonly waitingForResourceJobIds?: number[];
}

export interface JobEvent {
  readonly kind: 'job';
  readonly job?: FinishedJob;
  readonly jobId: number;
  /**
   * GitLab's `build_status`. A job's hook with `waiting_for_resource` is the one word that its `resource_group` made it
   * wait: to remember until its end, as its job span's `waitedForResource`.
   */
  readonly status?: string;
}

export type WebhookEvent = PipelineEvent | JobEvent;
