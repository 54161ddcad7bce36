import { readFileSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { createLocalJWKSet, createRemoteJWKSet, errors, JSONWebKeySet, jwtVerify, JWTVerifyGetKey } from 'jose';

/** GitLab's JWT job tokens: `glcbt-` followed by an RS256 JWT (SPEC §5). */
export const JOB_TOKEN_PREFIX = 'glcbt-';
export const JOB_TOKEN_AUDIENCE = 'gitlab-authz-token';
/** Clock skew and in-flight exports are forgiven this long after `exp`. */
export const JOB_TOKEN_EXP_GRACE_SECONDS = 60;
const SUBJECT = /^gid:\/\/gitlab\/Ci::Build\/([1-9][0-9]{0,15})$/;
/** An unknown `kid` re-reads the keys at most this often, so bad tokens cannot make us hammer the file or GitLab. */
const KEYS_RELOAD_COOLDOWN_MS = 5000;

/** Whether a job token has a JWT job token's form (verified or refused as one, never looked up by its digest). */
export function isJwtJobToken(token: string): boolean {
  return token.startsWith(JOB_TOKEN_PREFIX) && token.split('.').length === 3;
}

export type JobTokenCheck =
  | { readonly kind: 'jwt'; readonly jobId: number }
  | { readonly kind: 'opaque' }
  | { readonly kind: 'invalid'; readonly reason: string }
  /** The configured keys could not be read or fetched: an outage or a misconfiguration, not a bad token. */
  | { readonly kind: 'unavailable'; readonly reason: string };

/** GitLab's keys could not be read (file) or fetched (URL); the message names the variable and why. */
export class JobTokenKeysUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'JobTokenKeysUnavailableError';
  }
}

/** Where GitLab's public keys come from, and whether they can be had right now (readiness). */
export interface JobTokenKeys {
  readonly getKey: JWTVerifyGetKey;
  /** Why the keys cannot be read or fetched now, naming the variable; undefined when they can. */
  problem(): Promise<string | undefined>;
}

/** A JWKS as JSON text, checked to be one: jose refuses anything that is not a key set. */
function parseJwks(text: string): JSONWebKeySet {
  const jwks = JSON.parse(text) as JSONWebKeySet;
  createLocalJWKSet(jwks);
  return jwks;
}

function describeFileProblem(path: string, error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code !== undefined && !code.startsWith('ERR_JWKS')) return `JOB_TOKEN_JWKS_FILE: cannot read ${path} (${code})`;
  return `JOB_TOKEN_JWKS_FILE: ${path} is not a JSON Web Key Set (${(error as Error).message})`;
}

/**
 * Start-up check (SPEC §5): a configured JWKS file that cannot be read must stop the start, not
 * turn every JWT job token into "invalid job token". Undefined when the file is a readable key set.
 */
export function jwksFileProblem(path: string): string | undefined {
  try {
    parseJwks(readFileSync(path, 'utf8'));
    return undefined;
  } catch (error) {
    return describeFileProblem(path, error);
  }
}

/**
 * Keys from a JWKS file, re-read when a token names a `kid` the last read did not have (key
 * rotation): at once when the file changed, otherwise at most once per cooldown. Keys already read
 * keep verifying while the file is unreadable; a token they cannot verify is then an outage.
 */
export class FileJwks implements JobTokenKeys {
  private keySet: JWTVerifyGetKey | undefined;
  private loadedAt = 0;
  private loadedMtimeMs = -1;

  constructor(private readonly path: string) {}

  readonly getKey: JWTVerifyGetKey = async (header, token) => {
    if (this.keySet === undefined) await this.load();
    try {
      return await this.keySet!(header, token);
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey)) throw error;
      if (!(await this.changed()) && Date.now() - this.loadedAt < KEYS_RELOAD_COOLDOWN_MS) throw error;
      await this.load();
      return this.keySet!(header, token);
    }
  };

  async problem(): Promise<string | undefined> {
    try {
      parseJwks(await readFile(this.path, 'utf8'));
      return undefined;
    } catch (error) {
      return describeFileProblem(this.path, error);
    }
  }

  private async changed(): Promise<boolean> {
    try {
      return (await stat(this.path)).mtimeMs !== this.loadedMtimeMs;
    } catch (error) {
      throw new JobTokenKeysUnavailableError(describeFileProblem(this.path, error));
    }
  }

  private async load(): Promise<void> {
    this.loadedAt = Date.now();
    try {
      const mtimeMs = (await stat(this.path)).mtimeMs;
      this.keySet = createLocalJWKSet(parseJwks(await readFile(this.path, 'utf8')));
      this.loadedMtimeMs = mtimeMs;
    } catch (error) {
      throw new JobTokenKeysUnavailableError(describeFileProblem(this.path, error));
    }
  }
}

/** jose's answers that are about the token (its `kid`, its `alg`), not about fetching the keys. */
const tokenProblem = (error: unknown) =>
  error instanceof errors.JWKSNoMatchingKey ||
  error instanceof errors.JWKSMultipleMatchingKeys ||
  error instanceof errors.JOSENotSupported ||
  error instanceof errors.JOSEAlgNotAllowed;

/** Keys fetched from GitLab's JWKS URL by jose, which caches them and refetches on a new `kid`. */
export class RemoteJwks implements JobTokenKeys {
  private readonly remote: ReturnType<typeof createRemoteJWKSet>;
  /** Origin and path only: the URL's query or userinfo have no place in a log line. */
  private readonly shown: string;

  constructor(url: URL) {
    this.remote = createRemoteJWKSet(url, { cooldownDuration: KEYS_RELOAD_COOLDOWN_MS });
    this.shown = `${url.origin}${url.pathname}`;
  }

  readonly getKey: JWTVerifyGetKey = async (header, token) => {
    try {
      return await this.remote(header, token);
    } catch (error) {
      if (tokenProblem(error)) throw error;
      throw new JobTokenKeysUnavailableError(this.describe(error));
    }
  };

  async problem(): Promise<string | undefined> {
    if (this.remote.fresh) return undefined;
    try {
      await this.remote.reload();
      return undefined;
    } catch (error) {
      return this.describe(error);
    }
  }

  private describe(error: unknown): string {
    return `JOB_TOKEN_JWKS_URL: cannot fetch ${this.shown} (${(error as Error).message})`;
  }
}

export function jobTokenKeys(source: { file?: string; url?: string }): JobTokenKeys | undefined {
  if (source.url !== undefined) return new RemoteJwks(new URL(source.url));
  if (source.file !== undefined) return new FileJwks(source.file);
  return undefined;
}

/**
 * Tells JWT job tokens from opaque ones and verifies the former: RS256 only (so `none` and HS256
 * signed with the public key are refused), audience `gitlab-authz-token`, `exp` with 60 s grace,
 * subject naming the job. Opaque tokens can only be matched against a grant's digest.
 */
export class JobTokenVerifier {
  constructor(
    private readonly keys: JWTVerifyGetKey | undefined,
    private readonly issuer?: string,
  ) {}

  async check(token: string): Promise<JobTokenCheck> {
    if (!isJwtJobToken(token)) return { kind: 'opaque' };
    if (this.keys === undefined) return { kind: 'invalid', reason: 'JWT job tokens are not configured (no JWKS)' };
    try {
      const { payload } = await jwtVerify(token.slice(JOB_TOKEN_PREFIX.length), this.keys, {
        algorithms: ['RS256'],
        audience: JOB_TOKEN_AUDIENCE,
        clockTolerance: JOB_TOKEN_EXP_GRACE_SECONDS,
        requiredClaims: ['exp', 'sub'],
        ...(this.issuer === undefined ? {} : { issuer: this.issuer }),
      });
      const jobId = SUBJECT.exec(payload.sub ?? '')?.[1];
      if (jobId === undefined) return { kind: 'invalid', reason: 'job token subject is not a CI build' };
      return { kind: 'jwt', jobId: Number(jobId) };
    } catch (error) {
      if (error instanceof JobTokenKeysUnavailableError) return { kind: 'unavailable', reason: error.message };
      return { kind: 'invalid', reason: error instanceof errors.JOSEError ? error.code : 'malformed job token' };
    }
  }
}
