import type { EnforcedExport, GatewayGrant, SpanBudget, SpanLimits } from './otlp-types';

export interface IdentityAttribute {
  key: string;
  /** Integer ids for the `ci.*` keys; strings for the `cicd.*` keys, whose semantic conventions type them so. */
  value: { kind: 'int'; int: number } | { kind: 'string'; string: string };
}

/** Resource attribute keys the gateway owns: whatever the exporter put there is replaced (SPEC §6). */
export const IDENTITY_ATTRIBUTE_KEYS: ReadonlySet<string> = new Set([
  'ci.job.id',
  'ci.project.id',
  'ci.pipeline.id',
  'ci.runner.id',
  'cicd.pipeline.run.id',
  'cicd.pipeline.task.run.id',
  'cicd.worker.id',
]);

export function identityAttributes(grant: GatewayGrant): IdentityAttribute[] {
  for (const name of ['jobId', 'projectId', 'pipelineId', 'runnerId'] as const) {
    // A bad id here is a bug upstream of the gateway, not a bad request: refuse to stamp garbage.
    if (!Number.isSafeInteger(grant[name]) || grant[name] < 0) {
      throw new TypeError(`grant.${name} must be a non-negative safe integer`);
    }
  }
  const int = (key: string, value: number): IdentityAttribute => ({ key, value: { kind: 'int', int: value } });
  const string = (key: string, value: number): IdentityAttribute => ({
    key,
    value: { kind: 'string', string: String(value) },
  });
  return [
    int('ci.job.id', grant.jobId),
    int('ci.project.id', grant.projectId),
    int('ci.pipeline.id', grant.pipelineId),
    int('ci.runner.id', grant.runnerId),
    string('cicd.pipeline.run.id', grant.pipelineId),
    string('cicd.pipeline.task.run.id', grant.jobId),
    string('cicd.worker.id', grant.runnerId),
  ];
}

/**
 * Identity keys the gateway owns on spans, metric data points and log records (SPEC §6), with the grant's
 * values in the types GitLab Runner writes on its `job_execution` span: ids as integers, except
 * `ci.pipeline.id`, which the runner writes as a string. Only keys the item already carries are overwritten;
 * nothing is added to items that do not carry them.
 */
export function itemIdentityAttributes(grant: GatewayGrant): ReadonlyMap<string, IdentityAttribute> {
  const [job, project, pipeline, runner] = identityAttributes(grant);
  return new Map<string, IdentityAttribute>([
    [job.key, job],
    [project.key, project],
    [pipeline.key, { key: pipeline.key, value: { kind: 'string', string: String(grant.pipelineId) } }],
    [runner.key, runner],
  ]);
}

/** Lengths of the item identity keys, so a wire walker can skip decoding every other key. */
export const ITEM_IDENTITY_KEY_LENGTHS: ReadonlySet<number> = new Set(
  ['ci.job.id', 'ci.project.id', 'ci.pipeline.id', 'ci.runner.id'].map((key) => key.length),
);

/**
 * What an enforcement derives from a grant (its identity attributes encoded, its trace id as bytes), derived
 * once per grant object rather than once per export: the gateway's decision cache hands the same grant object
 * to every export of a reused decision (issue 12). Checked against the grant's fields on every use, so a grant
 * changed in place is derived again rather than stamped with another job's identity.
 */
export class PerGrant<T> {
  private readonly derived = new WeakMap<GatewayGrant, { grant: GatewayGrant; value: T }>();

  constructor(private readonly derive: (grant: GatewayGrant) => T) {}

  of(grant: GatewayGrant): T {
    const entry = this.derived.get(grant);
    if (entry !== undefined && sameGrant(entry.grant, grant)) return entry.value;
    const value = this.derive(grant);
    const { jobId, projectId, pipelineId, runnerId, traceId } = grant;
    this.derived.set(grant, { grant: { jobId, projectId, pipelineId, runnerId, traceId }, value });
    return value;
  }
}

function sameGrant(a: GatewayGrant, b: GatewayGrant): boolean {
  return a.jobId === b.jobId && a.projectId === b.projectId && a.pipelineId === b.pipelineId && a.runnerId === b.runnerId && a.traceId === b.traceId;
}

export function grantTraceIdHex(grant: GatewayGrant): string {
  if (typeof grant.traceId !== 'string' || !/^[0-9a-fA-F]{32}$/.test(grant.traceId)) {
    throw new TypeError('grant.traceId must be 32 hex digits');
  }
  return grant.traceId.toLowerCase();
}

/**
 * Decides span by span, in body order, which spans go on (SPEC §6): own trace only, then the per-span limits,
 * then the job's span quota, then its span rate. A span is charged against quota and rate only when it passed
 * the checks before, so a rejected span never uses up what an accepted one could have had.
 */
export class SpanAdmission {
  kept = 0;
  foreignTrace = 0;
  overLimits = 0;
  overQuota = 0;
  overRate = 0;
  private readonly quota: number;
  private readonly rate: number;

  constructor(
    spanBudget: number | SpanBudget,
    private readonly limits: SpanLimits,
  ) {
    const budget = typeof spanBudget === 'number' ? { quota: spanBudget, rate: Infinity } : spanBudget;
    // NaN or a negative budget fails closed; Infinity means unlimited.
    this.quota = budget.quota > 0 ? Math.floor(budget.quota) : 0;
    this.rate = budget.rate > 0 ? Math.floor(budget.rate) : 0;
  }

  admit(inGrantedTrace: boolean, withinLimits: boolean): boolean {
    if (!inGrantedTrace) {
      this.foreignTrace++;
      return false;
    }
    if (!withinLimits) {
      this.overLimits++;
      return false;
    }
    // Position among the spans that passed the checks before: the first `rate` of them fit the rate, the first
    // `quota` the quota, so each rejected span is counted under the limit that really stopped it.
    const position = this.kept + this.overQuota + this.overRate;
    if (position >= this.quota) {
      this.overQuota++;
      return false;
    }
    if (position >= this.rate) {
      this.overRate++;
      return false;
    }
    this.kept++;
    return true;
  }

  result(body: Buffer): EnforcedExport {
    const reasons: string[] = [];
    const reason = (count: number, why: string) => {
      if (count > 0) reasons.push(`${count} ${spans(count)} rejected: ${why}`);
    };
    reason(this.foreignTrace, "trace_id is not this CI job's trace");
    const { maxBytes, maxAttributes, maxAttributeValueBytes } = this.limits;
    reason(
      this.overLimits,
      `over the per-span limits (${maxBytes} bytes encoded, ${maxAttributes} attributes, ${maxAttributeValueBytes} bytes per attribute value)`,
    );
    reason(this.overQuota, "this CI job's span quota is exhausted");
    reason(this.overRate, 'this CI job is sending more spans per second than it may');
    return {
      body,
      forwardedItems: this.kept,
      rejectedItems: this.foreignTrace + this.overLimits + this.overQuota + this.overRate,
      rejections: { foreignTrace: this.foreignTrace, overLimits: this.overLimits, overQuota: this.overQuota, overRate: this.overRate },
      errorMessage: reasons.length > 0 ? reasons.join('; ') : undefined,
      nothingToForward: this.kept === 0,
    };
  }
}

export function countedResult(body: Buffer, items: number): EnforcedExport {
  return { body, forwardedItems: items, rejectedItems: 0, nothingToForward: items === 0 };
}

function spans(count: number): string {
  return count === 1 ? 'span' : 'spans';
}
