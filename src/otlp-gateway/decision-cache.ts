import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { GatewayAuthenticator, GatewayDecision } from './gateway-auth';

/** Refusals are remembered briefly (SPEC §6: at most 5 s), so a fixed token is accepted soon. */
export const NEGATIVE_DECISION_TTL_MS = 5000;

export interface DecisionCacheObserver {
  hit(): void;
  miss(): void;
}

/**
 * Auth decisions per token pair (SPEC §6): positive ones for the endpoint's max-age, refusals for at
 * most 5 s, outages never. Concurrent lookups of the same pair share one request to the authenticator.
 * Keys are digests of the token pair, so the cache holds no token.
 */
export class DecisionCache {
  private readonly decisions: LRUCache<string, GatewayDecision>;
  private readonly inFlight = new Map<string, Promise<GatewayDecision>>();

  constructor(
    private readonly authenticator: GatewayAuthenticator,
    maxEntries: number,
    private readonly observer: DecisionCacheObserver,
  ) {
    this.decisions = new LRUCache({ max: maxEntries, ttlAutopurge: false });
  }

  async decide(jobToken: string, runnerToken: string): Promise<GatewayDecision> {
    const key = createHash('sha256').update(jobToken).update('\0').update(runnerToken).digest('base64');
    const cached = this.decisions.get(key);
    if (cached !== undefined) {
      this.observer.hit();
      return cached;
    }
    const pending = this.inFlight.get(key);
    if (pending !== undefined) {
      this.observer.hit();
      return pending;
    }
    this.observer.miss();
    const lookup = this.authenticator.authenticate(jobToken, runnerToken).then((decision) => {
      const ttl = ttlOf(decision);
      if (ttl > 0) this.decisions.set(key, decision, { ttl });
      return decision;
    });
    this.inFlight.set(key, lookup);
    try {
      return await lookup;
    } finally {
      this.inFlight.delete(key);
    }
  }
}

function ttlOf(decision: GatewayDecision): number {
  switch (decision.kind) {
    case 'allowed':
      return decision.maxAgeSeconds * 1000;
    case 'unauthenticated':
    case 'forbidden':
      return NEGATIVE_DECISION_TTL_MS;
    case 'rate_limited':
    case 'unavailable':
      return 0;
    default: {
      const unreachable: never = decision;
      throw new Error(`unhandled decision ${JSON.stringify(unreachable)}`);
    }
  }
}
