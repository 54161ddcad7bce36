import { Injectable } from '@nestjs/common';
import { withTimeout } from './with-timeout';

const CHECK_TIMEOUT_MS = 1000;

type CheckResult = boolean | 'degraded';
export type CheckStatus = 'ok' | 'degraded' | 'failing';

/**
 * What `GET /-/readiness` asks (SPEC §8). The module that owns a dependency registers its check when
 * it is loaded: store (GrantsModule), flags (FlagsModule), job_token_keys (RunnerAuthModule), upstream
 * (CollectorModule), outbox and outbox_delivery (OutboxModule). So health needs no knowledge of their internals, and
 * a process asks only what it has loaded.
 */
@Injectable()
export class ReadinessChecks {
  private readonly checks = new Map<string, () => Promise<CheckResult> | CheckResult>();
  private starting = false;

  /**
   * The process is not ready until it has started whole: both ports listening and its start-up line written.
   * Otherwise the internal port answers 200 while the gateway port is still closed, and whoever waits for
   * readiness (a probe, a rollout, a test) goes on before the process is what it says.
   */
  holdUntilStarted(): void {
    this.starting = true;
  }

  started(): void {
    this.starting = false;
  }

  get isStarting(): boolean {
    return this.starting;
  }

  /** `degraded`: reported, but the process stays ready (a full outbox must not stop job pickups). */
  register(name: string, check: () => Promise<CheckResult> | CheckResult): void {
    this.checks.set(name, check);
  }

  async run(): Promise<Record<string, CheckStatus>> {
    const names = [...this.checks.keys()];
    const results = await Promise.all(names.map((name) => withTimeout(this.checks.get(name)!, CHECK_TIMEOUT_MS).catch(() => false)));
    return Object.fromEntries(names.map((name, i) => [name, results[i] === 'degraded' ? 'degraded' : results[i] ? 'ok' : 'failing']));
  }
}
