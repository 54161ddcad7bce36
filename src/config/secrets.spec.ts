import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeSecretFiles } from '../../test/helpers/internal-api';
import { ConfigError, loadConfig } from './app-config';
import { loadSecrets, readOrCreateSecretFile } from './secrets';

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

describe('secrets generated under .secrets/', () => {
  const fresh = () => join(mkdtempSync(join(tmpdir(), 'cjt-generated-')), '.secrets');

  it('creates each key once, readable by its owner only, and reads it back on the next start', () => {
    const dir = fresh();
    const first = loadSecrets(loadConfig({}), dir);
    expect(readdirSync(dir).sort()).toEqual(['capability_key', 'internal_api_secret', 'trace_key']);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    for (const name of readdirSync(dir)) expect(statSync(join(dir, name)).mode & 0o777).toBe(0o600);
    const second = loadSecrets(loadConfig({}), dir);
    expect([second.internalApiSecret, second.traceKey, ...second.capabilityKeys]).toEqual([first.internalApiSecret, first.traceKey, ...first.capabilityKeys]);
  });

  it("a process that loses the race to create a key uses the winner's key, not its own", () => {
    const path = join(fresh(), 'trace_key');
    // The other process links its key in place between this one's finding the file missing and its own link.
    const used = readOrCreateSecretFile(path, () => {
      expect(readOrCreateSecretFile(path, () => 'winner')).toBe('winner');
      return 'loser';
    });
    expect(used).toBe('winner\n');
    expect(readFileSync(path, 'utf8')).toBe('winner\n');
    expect(readdirSync(join(path, '..'))).toEqual(['trace_key']);
  });
});
