import type { EnforcedExport, GatewayGrant } from './otlp-payload';

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

export function grantTraceIdHex(grant: GatewayGrant): string {
  if (typeof grant.traceId !== 'string' || !/^[0-9a-fA-F]{32}$/.test(grant.traceId)) {
    throw new TypeError('grant.traceId must be 32 hex digits');
  }
  return grant.traceId.toLowerCase();
}

/** Decides span by span, in body order, which spans go on (SPEC §6: own trace only, then the job's quota). */
export class SpanAdmission {
  kept = 0;
  foreignTrace = 0;
  overQuota = 0;
  private readonly budget: number;

  constructor(spanBudget: number) {
    // NaN or a negative budget fails closed; Infinity means unlimited.
    this.budget = spanBudget > 0 ? Math.floor(spanBudget) : 0;
  }

  admit(inGrantedTrace: boolean): boolean {
    if (!inGrantedTrace) {
      this.foreignTrace++;
      return false;
    }
    if (this.kept >= this.budget) {
      this.overQuota++;
      return false;
    }
    this.kept++;
    return true;
  }

  result(body: Buffer): EnforcedExport {
    const reasons: string[] = [];
    if (this.foreignTrace > 0) {
      reasons.push(`${this.foreignTrace} ${spans(this.foreignTrace)} rejected: trace_id is not this CI job's trace`);
    }
    if (this.overQuota > 0) {
      reasons.push(`${this.overQuota} ${spans(this.overQuota)} rejected: this CI job's span quota is exhausted`);
    }
    return {
      body,
      forwardedItems: this.kept,
      rejectedItems: this.foreignTrace + this.overQuota,
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
