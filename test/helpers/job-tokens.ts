import { generateKeyPairSync, KeyObject } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, SignJWT } from 'jose';

export interface GitLabKeys {
  readonly jwksFile: string;
  readonly kid: string;
  readonly privateKey: KeyObject;
  readonly publicKey: KeyObject;
  /** Signs a job token in GitLab's format: `glcbt-` + RS256 JWT. */
  sign(jobId: number, options?: JobTokenOptions): Promise<string>;
  /** Adds a new key to the JWKS file (rotation) and returns its signer. */
  rotate(): Promise<GitLabKeys>;
}

export interface JobTokenOptions {
  readonly audience?: string;
  readonly subject?: string;
  /** Seconds from now; negative for an expired token. */
  readonly expiresIn?: number;
  readonly kid?: string;
  readonly issuer?: string;
}

/** A GitLab instance's job-token signing keys, published as a JWKS file the service reads. */
export async function makeGitLabKeys(jwksFile = join(mkdtempSync(join(tmpdir(), 'cjt-jwks-')), 'jwks.json'), published: object[] = []): Promise<GitLabKeys> {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const kid = `key-${published.length + 1}`;
  const keys = [...published, { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' }];
  writeFileSync(jwksFile, JSON.stringify({ keys }));
  const signer: GitLabKeys = {
    jwksFile,
    kid,
    privateKey,
    publicKey,
    sign: async (jobId, options = {}) => {
      const now = Math.floor(Date.now() / 1000);
      const jwt = await new SignJWT({ scope: 'ci', runner_id: 17 })
        .setProtectedHeader({ alg: 'RS256', kid: options.kid ?? kid, typ: 'JWT' })
        .setIssuer(options.issuer ?? 'https://gitlab.example.com')
        .setAudience(options.audience ?? 'gitlab-authz-token')
        .setSubject(options.subject ?? `gid://gitlab/Ci::Build/${jobId}`)
        .setIssuedAt(now - 10)
        .setExpirationTime(now + (options.expiresIn ?? 3600))
        .sign(privateKey);
      return `glcbt-${jwt}`;
    },
    rotate: () => makeGitLabKeys(jwksFile, keys),
  };
  return signer;
}
