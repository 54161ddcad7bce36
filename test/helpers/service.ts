import { NestFastifyApplication } from '@nestjs/platform-fastify';
import { ChildProcess, spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createInternalApp } from '../../src/app.factory';
import { AppConfig, loadConfig } from '../../src/config/app-config';
import { loadSecrets, Secrets } from '../../src/config/secrets';
import { createLogger } from '../../src/observability/logger';
import { repoRoot } from '../../simulator/repo-root';
import { makeSecretFiles, SecretFiles } from './internal-api';
import { freePort, waitFor } from './ports';

// From the clone's root, so the helper also runs from a bench's build output.
const ROOT = repoRoot();
const FLAGS_FILE = join(ROOT, 'config', 'flags.json');

/** Collects every log line the service writes, so tests can assert on what an operator would read. */
export class LogCapture extends Writable {
  readonly lines: string[] = [];

  override _write(chunk: Buffer, _encoding: string, callback: () => void): void {
    this.lines.push(
      ...chunk
        .toString()
        .split('\n')
        .filter((line) => line.length > 0),
    );
    callback();
  }

  text(): string {
    return this.lines.join('\n');
  }
}

export interface InProcessService {
  readonly app: NestFastifyApplication;
  readonly config: AppConfig;
  readonly secrets: Secrets;
  readonly logs: LogCapture;
  close(): Promise<void>;
}

/** The internal API in this process (Fastify `inject`), built from environment-style overrides. */
export async function startInProcess(env: Record<string, string> = {}): Promise<InProcessService> {
  const files = makeSecretFiles();
  const config = loadConfig({
    INTERNAL_API_SECRET_FILE: files.internalApiSecretFile,
    TRACE_KEY_FILE: files.traceKeyFile,
    CAPABILITY_KEY_FILE: files.capabilityKeyFile,
    FLAGS_FILE,
    LOG_LEVEL: 'info',
    ...env,
  });
  const secrets = loadSecrets(config);
  const logs = new LogCapture();
  const app = await createInternalApp(config, secrets, createLogger(config.process.logLevel, logs));
  await app.getHttpAdapter().getInstance().ready();
  let closed: Promise<void> | undefined;
  return { app, config, secrets, logs, close: () => (closed ??= app.close()) };
}

export interface ServiceProcess {
  readonly url: string;
  /** The OTLP gateway port of the same process (ROLE=all). */
  readonly gatewayUrl: string;
  readonly secrets: SecretFiles;
  readonly pid: number;
  /** What it wrote (with `logFile`, the end of its stderr only). */
  readonly output: () => string;
  /** Stops it with `signal` (SIGTERM: its graceful shutdown runs), SIGKILL after 15 s; answers its exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface ServiceOptions {
  /** false: answers once it is spawned, for a start meant to fail or replicas that race to start. */
  readonly waitReady?: boolean;
  /** The checkout whose build runs (a bench comparing another revision's); this one by default. */
  readonly root?: string;
  /** Its working directory: the checkout by default. */
  readonly cwd?: string;
  /** Another service's secret files, so both hold the same keys (a replica, a restart); fresh ones otherwise. */
  readonly secrets?: SecretFiles;
  /** The node binary that runs it (a bench comparing runtimes); this process's own by default. */
  readonly node?: string;
  /** Node's own arguments, before the script (a bench's `--cpu-prof`). */
  readonly nodeArgs?: readonly string[];
  /**
   * Its stdout (pino's lines, written in batches) appended to this file, as a container runtime takes it, rather than
   * kept in memory: a bench's service logs every request it measures.
   */
  readonly logFile?: string;
}

const OUTPUT_KEPT_WITH_LOG_FILE = 4000;
const STOP_GRACE_MS = 15_000;

/** Secret directories made for services, removed when this process exits (a restart may still need them before). */
const madeSecrets = new Set<string>();
function removedAtExit(secrets: SecretFiles): SecretFiles {
  if (madeSecrets.size === 0) process.once('exit', () => madeSecrets.forEach((dir) => rmSync(dir, { recursive: true, force: true })));
  madeSecrets.add(secrets.dir);
  return secrets;
}

/**
 * The built service (`dist/main.js`) as its own process, the way operators run it: on loopback, its secrets in files,
 * its capability URLs built on its own gateway port. Tests, benches and their worlds (`world.ts`) all start it here.
 */
export async function startService(env: Record<string, string> = {}, options: ServiceOptions = {}): Promise<ServiceProcess> {
  const root = options.root ?? ROOT;
  const main = join(root, 'dist', 'main.js');
  if (!existsSync(main)) throw new Error(`${main} is missing: \`npm test\` builds it first (npm run build)`);
  const secrets = options.secrets ?? removedAtExit(makeSecretFiles());
  const port = await freePort();
  const gatewayPort = await freePort();
  let output = '';
  const log = options.logFile === undefined ? 'pipe' : openSync(options.logFile, 'a');
  const child: ChildProcess = spawn(options.node ?? process.execPath, [...(options.nodeArgs ?? []), main], {
    cwd: options.cwd ?? root,
    env: {
      PATH: process.env.PATH,
      HOST: '127.0.0.1',
      INTERNAL_PORT: String(port),
      GATEWAY_PORT: String(gatewayPort),
      INTERNAL_API_SECRET_FILE: secrets.internalApiSecretFile,
      TRACE_KEY_FILE: secrets.traceKeyFile,
      CAPABILITY_KEY_FILE: secrets.capabilityKeyFile,
      // Capability URLs are built on it, so it must be where this process's gateway listens.
      GATEWAY_PUBLIC_URL: `http://127.0.0.1:${gatewayPort}`,
      FLAGS_FILE: join(root, 'config', 'flags.json'),
      ...env,
    },
    stdio: ['ignore', log, 'pipe'],
  });
  if (typeof log === 'number') closeSync(log);
  const keep = (chunk: Buffer) => {
    output += chunk.toString();
    if (options.logFile !== undefined) output = output.slice(-OUTPUT_KEPT_WITH_LOG_FILE);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;

  if (options.waitReady !== false) {
    try {
      await waitFor(`service on ${url}`, async () => {
        if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}: ${output}`);
        const response = await fetch(`${url}/-/readiness`);
        return response.status === 200 ? true : undefined;
      });
    } catch (error) {
      // A service that never became ready is stopped, not left behind to hold the test run open.
      if (child.exitCode === null) child.kill('SIGKILL');
      throw new Error(`${(error as Error).message} (output: ${output}${options.logFile === undefined ? '' : `; log: ${options.logFile}`})`);
    }
  }
  return {
    url,
    gatewayUrl: `http://127.0.0.1:${gatewayPort}`,
    secrets,
    pid: child.pid!,
    output: () => output,
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill(signal);
      const killer = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      const code = await exited;
      clearTimeout(killer);
      return code;
    },
  };
}

/** Runs the built service to completion (for configuration errors) and returns its exit code and output. */
export function runServiceToExit(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'dist', 'main.js')], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (code) => resolve({ code, stderr }));
  });
}

/** The sum of every series of the service's metric `name` (all its labels), as /metrics says now. */
export async function metric(service: ServiceProcess, name: string): Promise<number> {
  const text = await (await fetch(`${service.url}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith(name) && !line.startsWith('#'))
    .reduce((sum, line) => sum + Number(line.split(' ').pop()), 0);
}
