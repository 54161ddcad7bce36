import { Controller, Get, Header, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { MetricsService } from './metrics.service';
import { ReadinessChecks } from './readiness-checks';

@Controller()
export class HealthController {
  constructor(
    private readonly readinessChecks: ReadinessChecks,
    private readonly metrics: MetricsService,
  ) {}

  @Get('-/liveness')
  liveness(): { status: 'ok' } {
    return { status: 'ok' };
  }

  /**
   * 503 until the process has started whole and every registered check passes: store, flag definitions,
   * collector (SPEC §8); `degraded` is reported, not failing.
   */
  @Get('-/readiness')
  async readiness(@Res() reply: FastifyReply): Promise<void> {
    const checks = await this.readinessChecks.run();
    if (this.readinessChecks.isStarting) {
      void reply.status(503).send({ status: 'starting', checks });
      return;
    }
    const ready = Object.values(checks).every((status) => status !== 'failing');
    void reply.status(ready ? 200 : 503).send({ status: ready ? 'ok' : 'failing', checks });
  }

  @Get('metrics')
  @Header('content-type', 'text/plain; version=0.0.4; charset=utf-8')
  scrape(): Promise<string> {
    return this.metrics.registry.metrics();
  }
}
