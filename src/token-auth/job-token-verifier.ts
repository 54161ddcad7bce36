import { readFile, stat } from 'node:fs/promises';
import { createLocalJWKSet, createRemoteJWKSet, errors, JSONWebKeySet, jwtVerify, JWTVerifyGetKey } from 'jose';

/** GitLab's JWT job tokens: `glcbt-` followed by an RS256 JWT (SPEC §5). */
export const JOB_TOKEN_PREFIX = 'glcbt-';
export const JOB_TOKEN_AUDIENCE = 'gitlab-authz-token';
/** Clock skew and in-flight exports are forgiven this long after `exp`. */
export const JOB_TOKEN_EXP_GRACE_SECONDS = 60;
const SUBJECT = /^gid:\/\/gitlab\/Ci::Build\/([1-9][0-9]{0,15})$/;
/** An unknown `kid` re-reads the key file at most this often, so bad tokens cannot make us hammer it. */
const FILE_RELOAD_COOLDOWN_MS = 5000;

export type JobTokenCheck =
  | { readonly kind: 'jwt'; readonly jobId: number }
  | { readonly kind: 'opaque' }
  | { readonly kind: 'invalid'; readonly reason: string };

/**
 * Keys from a JWKS file, re-read when a token names a `kid` the last read did not have (key
 * rotation): at once when the file changed, otherwise at most once per cooldown.
 */
export class FileJwks {
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
      const changed = (await stat(this.path)).mtimeMs !== this.loadedMtimeMs;
      if (!changed && Date.now() - this.loadedAt < FILE_RELOAD_COOLDOWN_MS) throw error;
      await this.load();
      return this.keySet!(header, token);
    }
  };

  private async load(): Promise<void> {
    this.loadedAt = Date.now();
    this.loadedMtimeMs = (await stat(this.path)).mtimeMs;
    this.keySet = createLocalJWKSet(JSON.parse(await readFile(this.path, 'utf8')) as JSONWebKeySet);
  }
}

export function jobTokenKeys(source: { file?: string; url?: string }): JWTVerifyGetKey | undefined {
  if (source.url !== undefined) return createRemoteJWKSet(new URL(source.url), { cooldownDuration: FILE_RELOAD_COOLDOWN_MS });
  if (source.file !== undefined) return new FileJwks(source.file).getKey;
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
    if (!token.startsWith(JOB_TOKEN_PREFIX) || token.split('.').length !== 3) return { kind: 'opaque' };
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
      return { kind: 'invalid', reason: error instanceof errors.JOSEError ? error.code : 'malformed job token' };
    }
  }
}
