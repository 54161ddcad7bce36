import { Controller, Get, Header, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { FlagsService } from '../flags/flags.service';
import { GrantStore } from '../grants/grant';
import { GRANT_STORE } from '../grants/grants.constants';
import { MetricsService } from './metrics.service';

const READINESS_STORE_TIMEOUT_MS = 1000;

type CheckStatus = 'ok' | 'failing';

@Controller()
export class HealthController {
  constructor(
    @Inject(GRANT_STORE) private readonly store: GrantStore,
    private readonly flags: FlagsService,
    private readonly metrics: MetricsService,
  ) {}

  @Get('-/liveness')
  liveness(): { status: 'ok' } {
    return { status: 'ok' };
  }

  /** 503 until the store answers and flag definitions are in memory (SPEC §8). */
  @Get('-/readiness')
  async readiness(@Res() reply: FastifyReply): Promise<void> {
    const checks: Record<string, CheckStatus> = {
      store: (await this.storeAnswers()) ? 'ok' : 'failing',
      flags: this.flags.definitionsLoaded() ? 'ok' : 'failing',
    };
    const ready = Object.values(checks).every((status) => status === 'ok');
    void reply.status(ready ? 200 : 503).send({ status: ready ? 'ok' : 'failing', checks });
  }

  @Get('metrics')
  @Header('content-type', 'text/plain; version=0.0.4; charset=utf-8')
  scrape(): Promise<string> {
    return this.metrics.registry.metrics();
  }

  private async storeAnswers(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.store.ping(),
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), READINESS_STORE_TIMEOUT_MS))),
      ]);
      return true;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }
}
