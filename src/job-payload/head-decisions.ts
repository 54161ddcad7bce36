import { LRUCache } from 'lru-cache';
import { HeadDecision, TracedWorkStore } from '../traced-work/traced-work';

/** Root pipelines whose head decision a replica keeps: every job of a pipeline asks for the same one. */
const HEAD_DECISIONS_KEPT = 10_000;

/**
 * Root pipelines' head decisions (issue 35), pinned in the store at a pipeline's first pickup on this replica and
 * kept here afterwards, so a pipeline's later jobs cost no store call. A kept decision never changes while the
 * store remembers it, so the copy here is always the one in force. JobPayloadService bounds the pin by
 * STORE_TIMEOUT_MS; bench/job-payload.server.ts's floor pins through the same class.
 */
export class HeadDecisions {
  private readonly kept: LRUCache<number, HeadDecision>;

  constructor(
    private readonly store: TracedWorkStore,
    private readonly memoryMs: number,
  ) {
    this.kept = new LRUCache<number, HeadDecision>({ max: HEAD_DECISIONS_KEPT, ttl: memoryMs });
  }

  /** The decision this replica has pinned for the root pipeline, when it has: answered without a promise. */
  remembered(rootPipelineId: number): HeadDecision | undefined {
    return this.kept.get(rootPipelineId);
  }

  /** Keeps `proposed` unless the store has a decision already; answers (and remembers) the one in force. */
  async pin(rootPipelineId: number, proposed: HeadDecision): Promise<HeadDecision> {
    const pinned = await this.store.pinHeadDecision(rootPipelineId, proposed, this.memoryMs);
    this.kept.set(rootPipelineId, pinned);
    return pinned;
  }
}
