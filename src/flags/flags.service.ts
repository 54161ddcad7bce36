import { Inject, Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { Unleash, UnleashEvents } from 'unleash-client';
import { MetricsService } from '../observability/metrics.service';
import { OUTCOME_SAMPLING_FLAG, SAMPLING_FLAG, TELEMETRY_FLAG, UNLEASH_CLIENT } from './flags.constants';

const START_WAIT_MS = 2000;

/** What the `ci_job_telemetry` strategies and constraints can look at (SPEC §4 "Flags"). */
export interface FlagContext {
  readonly projectId: number;
  readonly namespaceId?: number;
  readonly rootNamespaceId?: number;
  readonly runnerId: number;
  readonly runnerType: string;
}

/**
 * The one place flags are evaluated. Evaluation is in memory only: unleash-client keeps the last
 * definitions it fetched (or read from the flag file), so job pickup never waits for Unleash.
 */
@Injectable()
export class FlagsService implements OnModuleInit {
  private readonly logger = new Logger(FlagsService.name);
  private loaded = false;
  private lastRefreshAt: number | undefined;
  /** Parsed policies by variant payload: a handful of distinct payloads, parsed once each. */

  constructor(
    @Inject(UNLEASH_CLIENT) private readonly unleash: Unleash,
    metrics: MetricsService,
  ) {
    metrics.gauge(
      'ci_job_telemetry_flag_definitions_age_seconds',
      'Seconds since flag definitions were last confirmed current by Unleash or the flag file',
      () => this.definitionsAgeSeconds(),
    );
    unleash.on(UnleashEvents.Ready, () => (this.loaded = true));
    unleash.on(UnleashEvents.Changed, () => {
      this.loaded = true;
      this.lastRefreshAt = Date.now();
      this.logger.log(`flag definitions updated (${this.unleash.getFeatureToggleDefinitions().length} toggles)`);
    });
    unleash.on(UnleashEvents.Unchanged, () => (this.lastRefreshAt = Date.now()));
    unleash.on(UnleashEvents.Warn, (message: string) => this.logger.warn(message));
    unleash.on(UnleashEvents.Error, (error: Error) => this.logger.warn(`unleash: ${error.message}`));
  }

  /**
   * Starting waits at most briefly: with Unleash unreachable the service still starts, evaluates with
   * what it has (a backup, or nothing: telemetry off) and reports not ready until definitions arrive.
   */
  async onModuleInit(): Promise<void> {
    const started = this.unleash.start().catch((error: Error) => this.logger.warn(`unleash start: ${error.message}`));
    await Promise.race([started, new Promise((resolve) => setTimeout(resolve, START_WAIT_MS).unref())]);
  }

  isTelemetryEnabled(context: FlagContext): boolean {
    return this.unleash.isEnabled(TELEMETRY_FLAG, { properties: propertiesOf(context) }, false);
  }

  /**
   * The outcome-sampling toggle's variant payload for this job's pipeline (SPEC §11): '' when on without one,
   * undefined when the toggle is off for it. Evaluated with the same context as `ci_job_telemetry`; outcome sampling
   * reads the policy from it.
   */
  outcomeSamplingPayload(context: FlagContext): string | undefined {
    const unleashContext = { properties: propertiesOf(context) };
    if (!this.unleash.isEnabled(OUTCOME_SAMPLING_FLAG, unleashContext, false)) return undefined;
    const variant = this.unleash.getVariant(OUTCOME_SAMPLING_FLAG, unleashContext);
    return (variant.enabled ? variant.payload?.value : undefined) ?? '';
  }

  /** Whether the outcome-sampling toggle is on for anyone (for the start-up warning and readiness). */
  outcomeSamplingToggled(): boolean {
    return this.unleash.getFeatureToggleDefinition(OUTCOME_SAMPLING_FLAG)?.enabled === true;
  }

  /**
   * Pipeline sampling percentage: the `rollout` of the sampling toggle's flexibleRollout strategy.
   * Absent or switched off means sampling is not in force: 100 %.
   */
  samplingPercent(): number {
    const toggle = this.unleash.getFeatureToggleDefinition(SAMPLING_FLAG);
    if (toggle === undefined || !toggle.enabled) return 100;
    const rollout = toggle.strategies?.find((strategy) => strategy.name === 'flexibleRollout')?.parameters?.rollout;
    const percent = Number(rollout);
    if (rollout === undefined || !Number.isFinite(percent)) return 100;
    return Math.min(100, Math.max(0, percent));
  }

  /** Whether any definitions are in memory (from Unleash, its backup, or the flag file). */
  definitionsLoaded(): boolean {
    return this.loaded;
  }

  /** Seconds since definitions were last confirmed current; undefined before the first load. */
  definitionsAgeSeconds(now = Date.now()): number | undefined {
    return this.lastRefreshAt === undefined ? undefined : (now - this.lastRefreshAt) / 1000;
  }
}

/** The context properties strategies and constraints see (SPEC §4 "Flags"). */
function propertiesOf(context: FlagContext): Record<string, string> {
  const properties: Record<string, string> = {
    projectId: String(context.projectId),
    runnerId: String(context.runnerId),
    runnerType: context.runnerType,
  };
  if (context.namespaceId !== undefined) properties.namespaceId = String(context.namespaceId);
  if (context.rootNamespaceId !== undefined) properties.rootNamespaceId = String(context.rootNamespaceId);
  return properties;
}
