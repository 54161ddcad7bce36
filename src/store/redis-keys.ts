/*
 * Every key the store writes, for every port. The names are what running installs already hold: a new
 * release reads them as they are, so a name here never changes.
 *
 * Redis Cluster runs a multi-key command (MULTI, MGET, a script) only when all its keys hash to one slot,
 * and only the part between the first `{` and `}` is hashed. So every key of one operation carries the
 * same hash tag: a job's grant and revocation, its span quota, span rate and span leases, and its traced
 * job share `{job:<id>}` (a pickup writes the grant and the traced job in one script). The job-token index
 * is looked up by digest alone, before the job is known, so it lives in its own slot and is written beside
 * the grant, never in the same script. Rate windows are one key each, tagged by their own name so they
 * spread over the cluster.
 */
export const GRANT_KEY = (jobId: number) => `cjt:{job:${jobId}}:grant`;
export const REVOKED_KEY = (jobId: number) => `cjt:{job:${jobId}}:revoked`;
export const JOB_TOKEN_KEY = (digest: string) => `cjt:{jobtoken:${digest}}`;

export const JOB_SPANS_KEY = (jobId: number) => `cjt:{job:${jobId}}:spans`;
export const JOB_SPAN_RATE_KEY = (jobId: number) => `cjt:{job:${jobId}}:span-rate`;
export const JOB_SPAN_LEASES_KEY = (jobId: number) => `cjt:{job:${jobId}}:span-leases`;
export const RATE_KEY = (key: string) => `cjt:{rate:${key}}`;

/*
 * SPEC §10. A traced pipeline sits in its own slot. The outbox is one slot, `{outbox}`, so that enqueueing
 * (dedup marker, entry, due time) is one atomic script on a cluster too: it holds a few spans per job, not
 * the export traffic, so one slot carries it.
 */
export const TRACED_JOB_KEY = (jobId: number) => `cjt:{job:${jobId}}:traced`;
export const TRACED_PIPELINE_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:traced`;
/** SPEC §10's final story: the highest version of a pipeline's span emitted, and its jobs' runner ends. */
export const PIPELINE_SPAN_VERSION_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:span-version`;
/** A root pipeline's head decision (sampling percentage, provisional policy), kept from its first pickup. */
export const HEAD_DECISION_KEY = (rootPipelineId: number) => `cjt:{pipeline:${rootPipelineId}}:head`;
/** A pipeline's latest end as its span told it, for a hook that says it runs again (a retry, a played job). */
export const PIPELINE_END_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:end`;
export const RUNNER_JOB_ENDS_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:runner-job-ends`;
/** A hash: per job or bridge of the root pipeline's trace, what the control plane told of it (its critical path's input). */
export const TRACE_STORY_KEY = (rootPipelineId: number) => `cjt:{pipeline:${rootPipelineId}}:story`;
/** A sorted set: each entry by when it is next due, an even millisecond; on lease, the odd one its lease ends at (see the claim). */
export const OUTBOX_DUE_KEY = 'cjt:{outbox}:due';
export const OUTBOX_ENQUEUED_KEY = 'cjt:{outbox}:enqueued';
export const OUTBOX_SPANS_KEY = 'cjt:{outbox}:spans';
export const OUTBOX_ATTEMPTS_KEY = 'cjt:{outbox}:attempts';
/**
 * A counter: the spans waiting in bundles beyond one per entry, so the outbox's size in spans is the due set's
 * size plus this. Reset whenever the due set is empty, so a bundle acknowledged by a version that did not know of
 * bundles (during a rolling upgrade) leaves no count behind for long.
 */
export const OUTBOX_BUNDLED_KEY = 'cjt:{outbox}:bundled';
/** Where versions before the due times told leases apart marked them: no longer written, emptied as entries are delivered. */
export const OUTBOX_LEASED_KEY = 'cjt:{outbox}:leased';
export const OUTBOX_SEEN_KEY = (spanId: string) => `cjt:{outbox}:seen:${spanId}`;

/*
 * SPEC §11. A provisional pipeline's parked spans, its decision and the facts the decision reads sit in its
 * trace's slot, so parking, deciding and releasing are each one atomic script on a cluster. The budget of all
 * traces together and the index of time limits are one slot, `{parking}`.
 */
export const PARKED_KEY = (traceId: string) => `cjt:{trace:${traceId}}:parked`;
export const PARKED_SIZE_KEY = (traceId: string) => `cjt:{trace:${traceId}}:parked-size`;
export const TRACE_DECISION_KEY = (traceId: string) => `cjt:{trace:${traceId}}:decision`;
export const OUTCOME_FACTS_KEY = (traceId: string) => `cjt:{trace:${traceId}}:facts`;
/** Statuses a pipeline's Job Hooks told of jobs the decorator did not trace, until a Pipeline Hook of it reads them. */
export const PIPELINE_JOB_STATUSES_KEY = (pipelineId: number) => `cjt:{pipeline:${pipelineId}}:job-statuses`;
export const PARKING_TOTAL_KEY = 'cjt:{parking}:total';
export const PARKING_OVERDUE_KEY = 'cjt:{parking}:overdue';
/** Within one parking transaction outside a cluster only: the entries refused, whose bodies it removes again. Never left behind. */
export const PARKING_TAKE_BACK_KEY = 'cjt:{parking}:take-back';
