import { Transform } from 'class-transformer';
import { IsString, Matches, MinLength } from 'class-validator';
import { Integer, OptionalText, toList, Variable } from '../variable';

/** Internal API authentication (SPEC §3). */
export class InternalApiConfig {
  /** Unset: a secret is generated under `.secrets/` on first start, as GitLab does for its own secrets. */
  @Variable('INTERNAL_API_SECRET_FILE') @OptionalText() readonly secretFile?: string;

  @Variable('INTERNAL_API_ISSUERS') @Transform(toList) @IsString({ each: true }) @MinLength(1, { each: true }) readonly issuers: string[] = ['gitlab'];

  @Variable('BODY_LIMIT_BYTES') @Integer({ min: 1024 }) readonly bodyLimitBytes: number = 8 * 1024 * 1024;

  /**
   * SHA-256 digests (hex) of caller keys accepted on the auth endpoint in place of the internal-API
   * JWT, for gateways that cannot sign one (nginx `auth_request`). Only digests are configured.
   */
  @Variable('AUTH_CALLER_KEY_DIGESTS')
  @Transform(toList)
  @Matches(/^[0-9a-f]{64}$/, { each: true, message: 'each entry must be a SHA-256 digest in lowercase hex' })
  readonly callerKeyDigests: string[] = [];
}
