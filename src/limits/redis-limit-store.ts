import { JOB_SPAN_LEASES_KEY, JOB_SPAN_RATE_KEY, JOB_SPANS_KEY, RATE_KEY } from '../store/redis-keys';
import { defineScripts, ttlArgument } from '../store/redis-scripts';
import { RedisStore } from '../store/redis-store';
import { LimitStore, SpanLease, SpanLeaseRequest, WindowBlock } from './limit-store';
import { LIMIT_SCRIPTS } from './redis-limit-store.scripts';

export class RedisLimitStore implements LimitStore {
  private readonly scripts;

  constructor(private readonly store: RedisStore) {
    this.scripts = defineScripts(store, LIMIT_SCRIPTS);
  }

  async takeWindowBlock(key: string, wanted: number, limit: number, windowMs: number): Promise<WindowBlock> {
    const [granted, ttl] = await this.store.guard(() => this.scripts.takeWindowBlock([RATE_KEY(key)], [wanted, limit, windowMs]));
    return { granted: Number(granted), resetInMs: Number(ttl) };
  }

  async returnWindowBlock(key: string, count: number): Promise<void> {
    if (count <= 0) return;
    await this.store.guard(() => this.scripts.giveBack([RATE_KEY(key)], [count]));
  }

  async leaseSpans(jobId: number, request: SpanLeaseRequest): Promise<SpanLease> {
    const [quotaGranted, rateGranted, rateTtl] = await this.store.guard(() =>
      this.scripts.leaseSpans(
        [JOB_SPANS_KEY(jobId), JOB_SPAN_RATE_KEY(jobId), JOB_SPAN_LEASES_KEY(jobId)],
        [
          Date.now(),
          request.leaseId,
          Math.round(request.spent),
          request.quotaWanted,
          request.rateWanted,
          request.limits.perJob,
          request.limits.perSecond,
          ttlArgument(request.quotaTtlMs),
          ttlArgument(request.leaseMs),
        ],
      ),
    );
    return { quotaGranted: Number(quotaGranted), rateGranted: Number(rateGranted), rateResetInMs: Number(rateTtl) };
  }

  async returnSpanLease(jobId: number, leaseId: string, unspent: number): Promise<void> {
    await this.store.guard(() => this.scripts.returnSpanLease([JOB_SPANS_KEY(jobId), JOB_SPAN_LEASES_KEY(jobId)], [leaseId, Math.max(0, unspent)]));
  }

  async releaseSpans(jobId: number, spans: number): Promise<void> {
    if (spans <= 0) return;
    await this.store.guard(() => this.scripts.giveBack([JOB_SPANS_KEY(jobId)], [spans]));
  }
}
