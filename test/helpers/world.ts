import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { ClickHouse, ClickHouseOverHttp, startClickHouse } from './clickhouse';
import { makeWebhookSecret, WebhookSecret } from './gitlab-webhooks';
import { GitLabKeys, makeGitLabKeys } from './job-tokens';
import { OtlpSink, startOtlpSink } from './otlp-sink';
import { RedisServer, startRedis } from './redis';
import { ServiceOptions, ServiceProcess, startService } from './service';

/** What a test or bench asks its world to have. The service, when asked for, is wired to the rest. */
export interface WorldOptions {
  /** A redis-server of its own, the services' store (`persistent`: what it acknowledged survives a stop and start). */
  readonly redis?: boolean | { readonly persistent: boolean };
  /** A stand-in collector that decodes what reaches it (otlp-sink.ts): the services' OTLP upstream. */
  readonly sink?: boolean;
  /**
   * ClickHouse's engine (chdb), with ClickHouse's HTTP interface when `http` is given. Not wired: a test loads it
   * and points what reads it there.
   */
  readonly clickhouse?: boolean | { readonly http: { readonly password: string }; readonly niceness?: number };
  /** GitLab's job-token signing keys, published as the JWKS file the gateway checks job tokens against. */
  readonly gitlabKeys?: boolean;
  /** The secret GitLab's webhooks carry, in the file the service reads it from. */
  readonly webhookSecret?: boolean;
  /** The built service (true, or these variables over the world's wiring); none when absent. */
  readonly service?: boolean | Readonly<Record<string, string>>;
  readonly serviceOptions?: ServiceOptions;
}

export interface World<C extends ClickHouse = ClickHouse> {
  // Each handle is there when it was asked for; reading one that was not throws, naming the option to ask with.
  readonly redis: RedisServer;
  readonly sink: OtlpSink;
  readonly clickhouse: C;
  readonly keys: GitLabKeys;
  readonly webhookSecret: WebhookSecret;
  readonly service: ServiceProcess;
  /** What every service of this world starts with: REDIS_URL, OTLP_UPSTREAM_URL, JOB_TOKEN_JWKS_FILE, GITLAB_WEBHOOK_SECRET_FILE. */
  readonly env: Readonly<Record<string, string>>;
  /**
   * Another service in this world (a replica, a restart): the world's wiring with `env` over it, and the keys of the
   * world's first service, so each accepts what the other issued.
   */
  startService(env?: Readonly<Record<string, string>>, options?: ServiceOptions): Promise<ServiceProcess>;
  /** Stops every service it started, then the servers, and removes the files it wrote. Once is enough; again does nothing. */
  stop(): Promise<void>;
}

function asked<T>(value: T | undefined, option: string): T {
  if (value === undefined) throw new Error(`this world has no ${option}: startWorld({ ${option}: true, … })`);
  return value;
}

/**
 * A world for one test file or one bench in one call: the servers it asks for, started side by side, and the built
 * service wired to them. What failed to start stops what did.
 */
export async function startWorld(options: WorldOptions & { readonly clickhouse: { readonly http: object } }): Promise<World<ClickHouseOverHttp>>;
export async function startWorld(options: WorldOptions): Promise<World>;
export async function startWorld(options: WorldOptions): Promise<World<ClickHouse | ClickHouseOverHttp>> {
  const servers: Array<{ stop(): Promise<void> }> = [];
  const services: ServiceProcess[] = [];
  const files: string[] = [];
  const started = <T extends { stop(): Promise<unknown> }>(server: T): T => {
    servers.push({ stop: async () => void (await server.stop()) });
    return server;
  };
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await Promise.all(services.map((service) => service.stop()));
      await Promise.all(servers.map((server) => server.stop()));
      for (const file of files) rmSync(file, { recursive: true, force: true });
    })());

  try {
    const [redis, sink, clickhouse, keys] = await Promise.all([
      options.redis ? startRedis(options.redis === true ? {} : options.redis).then(started) : undefined,
      options.sink ? startOtlpSink().then(started) : undefined,
      options.clickhouse === true ? startClickHouse().then(started) : options.clickhouse ? startClickHouse(options.clickhouse).then(started) : undefined,
      options.gitlabKeys ? makeGitLabKeys() : undefined,
    ]);
    if (keys !== undefined) files.push(dirname(keys.jwksFile));
    const webhookSecret = options.webhookSecret ? makeWebhookSecret() : undefined;
    if (webhookSecret !== undefined) files.push(dirname(webhookSecret.file));
    const env: Record<string, string> = {
      ...(redis === undefined ? {} : { REDIS_URL: redis.url }),
      ...(sink === undefined ? {} : { OTLP_UPSTREAM_URL: sink.url }),
      ...(keys === undefined ? {} : { JOB_TOKEN_JWKS_FILE: keys.jwksFile }),
      ...(webhookSecret === undefined ? {} : { GITLAB_WEBHOOK_SECRET_FILE: webhookSecret.file }),
    };
    const startOne = async (overrides: Readonly<Record<string, string>> = {}, serviceOptions: ServiceOptions = {}) => {
      const service = await startService({ ...env, ...overrides }, { secrets: services[0]?.secrets, ...options.serviceOptions, ...serviceOptions });
      services.push(service);
      return service;
    };
    const service = options.service ? await startOne(options.service === true ? {} : options.service) : undefined;
    return {
      get redis() {
        return asked(redis, 'redis');
      },
      get sink() {
        return asked(sink, 'sink');
      },
      get clickhouse() {
        return asked(clickhouse, 'clickhouse');
      },
      get keys() {
        return asked(keys, 'gitlabKeys');
      },
      get webhookSecret() {
        return asked(webhookSecret, 'webhookSecret');
      },
      get service() {
        return asked(service, 'service');
      },
      env,
      startService: startOne,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
