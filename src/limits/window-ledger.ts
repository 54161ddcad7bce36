import { ASK_AGAIN, BlockLease, blockFor, HeldBlock, LedgerOptions, Receipt } from './block-lease';
import { LimitStore } from './limit-store';

export type WindowCharge = { readonly allowed: true; readonly receipt: Receipt } | { readonly allowed: false; readonly resetInMs: number };

interface WindowBlockHeld extends HeldBlock {
  remaining: number;
  resetsAt: number;
  lastBlock: number;
  /** The last block came short of what was asked: the window itself is spent, on every replica. */
  windowSpent: boolean;
}

interface WindowNeed {
  readonly limit: number;
  readonly windowMs: number;
}

/** Blocks of fixed windows, by key: a runner's exports per window (the gateway's) and its auth lookups (the auth endpoint's). */
export class WindowLedger extends BlockLease<string, WindowBlockHeld, WindowNeed> {
  constructor(
    private readonly store: Pick<LimitStore, 'takeWindowBlock' | 'returnWindowBlock'>,
    options: LedgerOptions = {},
  ) {
    super('window', options);
  }

  /** One hit of `key`'s window (`limit` per `windowMs`): answered without a promise while the block lasts. */
  charge(key: string, limit: number, windowMs: number): WindowCharge | Promise<WindowCharge> {
    const now = this.clock.now();
    const state = this.held.get(key);
    const need = { limit, windowMs };
    if (state !== undefined && state.resetsAt > now && state.remaining >= 1) return this.spend(key, state, need, now);
    let windowsAsked = 0;
    return this.refillAndDecide(key, need, (refilled, lastAttempt) => {
      const at = this.clock.now();
      const current = refilled !== undefined && refilled.resetsAt > at;
      if (current && refilled.remaining >= 1) return this.spend(key, refilled, need, at);
      // The window ended between the store's answer and now (or the block was handed back): the next one is asked once more.
      if (!current && windowsAsked++ === 0) return ASK_AGAIN;
      // Charges sharing the refill spent it while the window still has room: another block.
      if (current && !refilled.windowSpent && !lastAttempt) return ASK_AGAIN;
      return { allowed: false as const, resetInMs: Math.max(0, (refilled?.resetsAt ?? at) - at) };
    });
  }

  protected emptyBlock(_need: WindowNeed, now: number): WindowBlockHeld {
    return { remaining: 0, resetsAt: 0, lastBlock: 0, windowSpent: false, usedAt: now };
  }

  protected async takeBlock(key: string, state: WindowBlockHeld, { limit, windowMs }: WindowNeed): Promise<void> {
    const wanted = blockFor(1, limit);
    const block = await this.store.takeWindowBlock(key, wanted, limit, windowMs);
    const now = this.clock.now();
    const resetsAt = now + block.resetInMs;
    // A block of a new window replaces what was left of the old one, which ended with it.
    state.remaining = (state.resetsAt > now && Math.abs(state.resetsAt - resetsAt) < windowMs / 2 ? state.remaining : 0) + block.granted;
    state.resetsAt = resetsAt;
    state.lastBlock = wanted;
    state.windowSpent = block.granted < wanted;
  }

  protected giveBack(key: string, state: WindowBlockHeld): Promise<void> | undefined {
    if (state.remaining <= 0 || state.resetsAt <= this.clock.now()) return undefined;
    return this.store.returnWindowBlock(key, state.remaining);
  }

  private spend(key: string, state: WindowBlockHeld, need: WindowNeed, now: number): WindowCharge {
    state.remaining--;
    state.usedAt = now;
    this.refillEarly(key, need, state, state.remaining < state.lastBlock / 2);
    const resetsAt = state.resetsAt;
    let refunded = false;
    return {
      allowed: true,
      receipt: {
        count: 1,
        refund: () => {
          if (refunded) return;
          refunded = true;
          // A hit of a window that has ended needs no giving back: its window is gone.
          if (this.held.get(key) === state && state.resetsAt === resetsAt && resetsAt > this.clock.now()) state.remaining++;
        },
      },
    };
  }
}
