import { createHmac, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { AppConfig, ConfigError } from './app-config';

/** Secrets are base64, at least 32 bytes, as GitLab's workhorse and shell secrets are (SPEC §3). */
const MIN_SECRET_BYTES = 32;

export interface Secrets {
  /** HS256 key of the internal API JWT (SPEC §3). */
  readonly internalApiSecret: Buffer;
  /** Key of the trace and span id HMACs (SPEC §4 "Trace context"); shared with whatever emits job spans. */
  readonly traceKey: Buffer;
  /** Key of the runner and job token digests held in grants. */
  readonly tokenDigestKey: Buffer;
  /**
   * Keys of the per-job capability MACs (SPEC §4, §6): the current key, which mints, then the
   * previous one while a rotation lasts, which is still accepted so running jobs keep exporting.
   */
  readonly capabilityKeys: readonly Buffer[];
  /** Credentials of the Redis store (SPEC §7), each from its own file; absent when not configured. */
  readonly redis: RedisSecrets;
  /** Password of the read API's ClickHouse user (SPEC §12), from CLICKHOUSE_PASSWORD_FILE; absent when not configured. */
  readonly clickhousePassword?: string;
}

export interface RedisSecrets {
  readonly password?: string;
  readonly sentinelPassword?: string;
  /** PEM text of the CA the Redis servers' certificates chain to. */
  readonly tlsCa?: string;
}

/** A password file holds the password as written; only the line end an editor adds is not part of it. */
function readTextFile(variable: string, path: string | undefined, problems: string[]): string | undefined {
  if (path === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(path, 'utf8').replace(/\r?\n$/, '');
  } catch (error) {
    problems.push(`${variable}: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
    return undefined;
  }
  if (text.length === 0) problems.push(`${variable}: ${path} is empty`);
  return text;
}

/**
 * Key of the token digests, derived from the trace key so deployments manage one key file. The
 * label keeps it apart from the trace and span id HMACs ("pipeline:…", "job:…"), and a digest is
 * useless without the token it came from.
 */
function deriveTokenDigestKey(traceKey: Buffer): Buffer {
  return createHmac('sha256', traceKey).update('ci-job-telemetry token digest v1').digest();
}

/**
 * The generated secret at `path`, created on first use. Replicas started at the same moment in one
 * directory all find it missing, so each writes a candidate to a file of its own and hard-links it to
 * `path`: link() fails with EEXIST for every process but one, and the file appears complete or not at
 * all, so a loser reads the winner's whole key (never a half-written one) and every process uses the
 * same key. The candidate is synced before the link, so a crash cannot leave an empty key file behind.
 */
export function readOrCreateSecretFile(path: string, generate: () => string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const text = generate();
  const candidate = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}`);
  const fd = openSync(candidate, 'wx', 0o600);
  try {
    writeSync(fd, `${text}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    linkSync(candidate, path);
    return text;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return readFileSync(path, 'utf8');
  } finally {
    unlinkSync(candidate);
  }
}

function readSecret(variable: string, path: string | undefined, generatedPath: string, problems: string[]): Buffer {
  let text: string;
  if (path === undefined) {
    // Unset: behave like GitLab does for its own secrets and create one on first start, so the
    // embedded quick start needs no setup. An explicitly named file that is missing is an error below.
    text = readOrCreateSecretFile(generatedPath, () => randomBytes(MIN_SECRET_BYTES).toString('base64'));
    path = generatedPath;
  } else {
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      problems.push(`${variable}: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
      return Buffer.alloc(0);
    }
  }
  const trimmed = text.trim();
  const secret = Buffer.from(trimmed, 'base64');
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(trimmed) || secret.length < MIN_SECRET_BYTES) {
    problems.push(`${variable}: ${path} must hold at least ${MIN_SECRET_BYTES} bytes, base64-encoded`);
  }
  return secret;
}

/** CLICKHOUSE_PASSWORD_FILE alone, for a command that reads ClickHouse and needs no other secret (`npm run -s trace`). */
export function loadClickHousePassword(config: AppConfig): string | undefined {
  const problems: string[] = [];
  const password = readTextFile('CLICKHOUSE_PASSWORD_FILE', config.reads.clickhousePasswordFile, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return password;
}

export function loadSecrets(config: AppConfig, generatedDir = '.secrets'): Secrets {
  const problems: string[] = [];
  const internalApiSecret = readSecret('INTERNAL_API_SECRET_FILE', config.internalApi.secretFile, `${generatedDir}/internal_api_secret`, problems);
  const traceKey = readSecret('TRACE_KEY_FILE', config.jobPayload.traceKeyFile, `${generatedDir}/trace_key`, problems);
  // Its own key, not one derived from the trace key: whoever holds the trace key to emit job spans
  // (SPEC §4) must not be able to mint export credentials.
  const capabilityKeys = [readSecret('CAPABILITY_KEY_FILE', config.jobPayload.capabilityKeyFile, `${generatedDir}/capability_key`, problems)];
  if (config.jobPayload.capabilityPreviousKeyFile !== undefined) {
    capabilityKeys.push(readSecret('CAPABILITY_PREVIOUS_KEY_FILE', config.jobPayload.capabilityPreviousKeyFile, '', problems));
  }
  const redis: RedisSecrets = {
    password: readTextFile('REDIS_PASSWORD_FILE', config.store.passwordFile, problems),
    sentinelPassword: readTextFile('REDIS_SENTINEL_PASSWORD_FILE', config.store.sentinelPasswordFile, problems),
    tlsCa: readTextFile('REDIS_TLS_CA_FILE', config.store.tlsCaFile, problems),
  };
  const clickhousePassword = readTextFile('CLICKHOUSE_PASSWORD_FILE', config.reads.clickhousePasswordFile, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return {
    internalApiSecret,
    traceKey,
    tokenDigestKey: deriveTokenDigestKey(traceKey),
    capabilityKeys,
    redis,
    ...(clickhousePassword === undefined ? {} : { clickhousePassword }),
  };
}
