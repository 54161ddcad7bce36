import { LRUCache } from 'lru-cache';
import { AuthOutcome } from './auth-outcome';
import { credentialCacheKey, RunnerCredential } from './runner-credential';

/** Refusals are remembered briefly (SPEC §6: at most 5 s), so a fixed token is accepted soon. */
export const NEGATIVE_DECISION_TTL_MS = 5000;

export interface DecisionCacheObserver {
  hit(): void;
  miss(): void;
}

/** Milliseconds from a monotonic source: `performance` in production, a hand-moved clock in tests. */
export interface DecisionClock {
  now(): number;
}

export interface CachedDecision {
  readonly decision: AuthOutcome;
  /** How long ago the decision was made: a reused decision's max-age counts down. */
  readonly ageMs: number;
}

/**
 * Auth decisions per credential (token pair or capability): positive ones for their max-age, refusals
 * for at most 5 s, outages never. Concurrent lookups of the same credential share one lookup. Keys
 * are digests of the credential, so the cache holds no token and no capability.
 * Used in front of the auth endpoint and in the gateway (SPEC §2, §6).
 */
export class DecisionCache {
  private readonly decisions: LRUCache<string, { decision: AuthOutcome; decidedAt: number }> | undefined;
  private readonly inFlight = new Map<string, Promise<AuthOutcome>>();

  /** `maxEntries` 0 turns caching off; concurrent identical lookups are still shared. */
  constructor(
    private readonly lookup: (credential: RunnerCredential) => Promise<AuthOutcome>,
    maxEntries: number,
    private readonly observer: DecisionCacheObserver,
    private readonly clock: DecisionClock = performance,
  ) {
    // ttlResolution 0: expiry is read from the clock on every lookup, never from a time cached for 1 ms.
    this.decisions = maxEntries > 0 ? new LRUCache({ max: maxEntries, perf: clock, ttlResolution: 0 }) : undefined;
  }

  /**
   * A decision still fresh in the cache is returned as it is, without a promise: nginx asks for one on
   * every export, and the gateway on every export it takes. Anything else is looked up, shared with
   * identical lookups already under way.
   */
  decide(credential: RunnerCredential): CachedDecision | Promise<CachedDecision> {
    const key = credentialCacheKey(credential);
    if (key === undefined) return this.lookup(credential).then(fresh);
    const cached = this.decisions?.get(key);
    if (cached !== undefined) {
      this.observer.hit();
      return { decision: cached.decision, ageMs: this.clock.now() - cached.decidedAt };
    }
    const pending = this.inFlight.get(key);
    if (pending !== undefined) {
      this.observer.hit();
      return pending.then(fresh);
    }
    this.observer.miss();
    const lookup = this.lookup(credential).then((decision) => {
      const ttl = ttlOf(decision);
      if (ttl > 0) this.decisions?.set(key, { decision, decidedAt: this.clock.now() }, { ttl });
      return decision;
    });
    this.inFlight.set(key, lookup);
    const forget = () => this.inFlight.delete(key);
    lookup.then(forget, forget);
    return lookup.then(fresh);
  }
}

function fresh(decision: AuthOutcome): CachedDecision {
  return { decision, ageMs: 0 };
}

function ttlOf(decision: AuthOutcome): number {
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
