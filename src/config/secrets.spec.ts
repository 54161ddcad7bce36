import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeSecretFiles } from '../../test/helpers/internal-api';
import { ConfigError, loadConfig } from './app-config';
import { loadSecrets } from './secrets';

describe('Redis credentials from files', () => {
  const files = makeSecretFiles();
  const base = { INTERNAL_API_SECRET_FILE: files.internalApiSecretFile, TRACE_KEY_FILE: files.traceKeyFile, CAPABILITY_KEY_FILE: files.capabilityKeyFile };

  it('reads each password as written, without the line end an editor adds', () => {
    writeFileSync(join(files.dir, 'redis-password'), ' pass word \n');
    writeFileSync(join(files.dir, 'sentinel-password'), 'sentinel\r\n');
    const secrets = loadSecrets(
      loadConfig({
        ...base,
        REDIS_SENTINELS: 'sentinel-0:26379',
        REDIS_SENTINEL_MASTER: 'cjt',
        REDIS_PASSWORD_FILE: join(files.dir, 'redis-password'),
        REDIS_SENTINEL_PASSWORD_FILE: join(files.dir, 'sentinel-password'),
      }),
    );
    expect(secrets.redis).toEqual({ password: ' pass word ', sentinelPassword: 'sentinel', tlsCa: undefined });
  });

  it('names a password file it cannot read, and an empty one, one line each', () => {
    writeFileSync(join(files.dir, 'empty'), '\n');
    const config = loadConfig({
      ...base,
      REDIS_URL: 'redis://redis:6379',
      REDIS_PASSWORD_FILE: join(files.dir, 'missing'),
      REDIS_TLS_CA_FILE: join(files.dir, 'empty'),
    });
    let problems: string[] = [];
    try {
      loadSecrets(config);
    } catch (error) {
      problems = (error as ConfigError).problems;
    }
    expect(problems).toEqual([
      `REDIS_PASSWORD_FILE: cannot read ${join(files.dir, 'missing')} (ENOENT)`,
      `REDIS_TLS_CA_FILE: ${join(files.dir, 'empty')} is empty`,
    ]);
  });
});
