import { Injectable } from '@nestjs/common';
import { Counter } from 'prom-client';
import { MetricsService } from '../observability/metrics.service';
import { DecisionCacheObserver } from '../runner-auth/decision-cache';

/** What an operator watches of the auth endpoint (SPEC §5, §8): how often nginx's questions are answered from the cache. */
@Injectable()
export class TokenAuthMetrics implements DecisionCacheObserver {
  private readonly hits: Counter.Internal;
  private readonly misses: Counter.Internal;

  constructor(metrics: MetricsService) {
    const cache = new Counter({
      name: 'ci_job_telemetry_auth_decision_cache_total',
      help: 'Auth endpoint decisions served from the cache (hit) or looked up in the store (miss)',
      labelNames: ['result'],
      registers: [metrics.registry],
    });
    this.hits = cache.labels('hit');
    this.misses = cache.labels('miss');
  }

  hit(): void {
    this.hits.inc();
  }

  miss(): void {
    this.misses.inc();
  }
}
