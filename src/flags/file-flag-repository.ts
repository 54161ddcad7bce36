import { EventEmitter } from 'node:events';
import { readFile } from 'node:fs/promises';
import { unwatchFile, watchFile } from 'node:fs';
import type { ClientFeaturesResponse } from 'unleash-client';
import { UnleashEvents } from 'unleash-client';
import type { EnhancedFeatureInterface, FeatureInterface } from 'unleash-client/lib/feature';
import type { RepositoryInterface } from 'unleash-client/lib/repository';
import type { Segment } from 'unleash-client/lib/strategy/strategy';

/** The embedded default (SPEC §4 "Flags") promises a change is in force within 5 s. */
export const FLAG_FILE_POLL_MS = 1000;

/**
 * Serves flag definitions from a local file in Unleash's client-features format to unleash-client,
 * so the embedded default evaluates with exactly the strategies a real Unleash server would.
 * A broken file never replaces the last good definitions.
 */
export class FileFlagRepository extends EventEmitter implements RepositoryInterface {
  private features = new Map<string, FeatureInterface>();
  private segments = new Map<number, Segment>();
  private lastText: string | undefined;
  /** The last warning given, so one that still holds is not given again (watchFile also reports a missing file once). */
  private lastWarning: string | undefined;
  private loaded = false;
  private stopped = false;

  constructor(
    readonly path: string,
    private readonly pollMs = FLAG_FILE_POLL_MS,
  ) {
    super();
  }

  async start(): Promise<void> {
    // fs.watchFile polls: unlike fs.watch it survives editors that replace the file and bind mounts.
    watchFile(this.path, { interval: this.pollMs, persistent: false }, () => void this.reload());
    await this.reload();
  }

  stop(): void {
    this.stopped = true;
    unwatchFile(this.path);
  }

  getToggle(name: string): FeatureInterface | undefined {
    return this.features.get(name);
  }

  getToggles(): FeatureInterface[] {
    return [...this.features.values()];
  }

  getTogglesWithSegmentData(): EnhancedFeatureInterface[] {
    return this.getToggles().map((feature) => ({
      ...feature,
      strategies: feature.strategies?.map((strategy) => ({
        ...strategy,
        segments: strategy.segments?.map((id) => this.segments.get(id)).filter((s): s is Segment => s !== undefined),
      })),
    })) as EnhancedFeatureInterface[];
  }

  getSegment(id: number): Segment | undefined {
    return this.segments.get(id);
  }

  private async reload(): Promise<void> {
    if (this.stopped) return;
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (error) {
      const problem = `flag file ${this.path} ${unreadable(error as NodeJS.ErrnoException)}`;
      this.warn(
        this.loaded
          ? `${problem}; keeping the last good definitions until it can be read`
          : `${problem}: there are no flag definitions, so telemetry is off for every job and readiness fails; create it (the repository's config/flags.json is an example) or point FLAGS_FILE at yours, or UNLEASH_URL at an Unleash server`,
      );
      return;
    }
    if (text === this.lastText) {
      this.lastWarning = undefined;
      this.emit(UnleashEvents.Unchanged);
      return;
    }
    let parsed: ClientFeaturesResponse;
    try {
      parsed = parseClientFeatures(text);
    } catch (error) {
      const problem = `flag file ${this.path} rejected: ${(error as Error).message}`;
      this.warn(
        this.loaded
          ? `${problem}; keeping the last good definitions`
          : `${problem}; there are no flag definitions, so telemetry is off for every job and readiness fails until it parses`,
      );
      return;
    }
    this.lastText = text;
    this.lastWarning = undefined;
    this.features = new Map(parsed.features.map((feature) => [feature.name, feature]));
    this.segments = new Map((parsed.segments ?? []).map((segment) => [segment.id, segment]));
    if (!this.loaded) {
      this.loaded = true;
      this.emit(UnleashEvents.Ready);
    }
    this.emit(UnleashEvents.Changed, parsed.features);
  }

  private warn(message: string): void {
    if (message === this.lastWarning) return;
    this.lastWarning = message;
    this.emit(UnleashEvents.Warn, message);
  }
}

function unreadable(error: NodeJS.ErrnoException): string {
  switch (error.code) {
    case 'ENOENT':
      return 'does not exist';
    case 'EACCES':
      return 'cannot be read (permission denied)';
    case 'EISDIR':
      return 'is a directory, not a file';
    default:
      return `cannot be read (${error.message})`;
  }
}

export function parseClientFeatures(text: string): ClientFeaturesResponse {
  const parsed = JSON.parse(text) as Partial<ClientFeaturesResponse>;
  if (typeof parsed !== 'object' || parsed === null || !Array.isArray(parsed.features)) {
    throw new Error('expected an object with a "features" array (Unleash client-features format)');
  }
  parsed.features.forEach((feature, index) => {
    if (typeof feature?.name !== 'string' || typeof feature.enabled !== 'boolean' || !Array.isArray(feature.strategies)) {
      throw new Error(`features[${index}] needs a string "name", a boolean "enabled" and a "strategies" array`);
    }
  });
  return { version: parsed.version ?? 2, features: parsed.features, segments: parsed.segments };
}
