import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, IncomingMessage, request as httpRequest, Server, ServerResponse } from 'node:http';
import { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { InternalApiTokenVerifier, signInternalApiToken } from '../../src/internal-api/internal-api-token';
import { writeFlagsFile } from '../helpers/flags-file';
import { freePort } from '../helpers/ports';
import { readsWorld, writeCollectorFiles } from '../helpers/reads-cases';
import { ServiceProcess, startService } from '../helpers/service';
import { acrossWorld } from '../suites/across-endpoints.suite';

/*
 * The Ruby client (clients/ruby, issue 30) against the real service. Each test runs one group of its minitest
 * files with Debian's Ruby (scripts/install-test-deps.sh installs it) and passes when every Ruby test in it
 * passed; the Ruby tests hold the assertions, including the deadline checks (a call returns within its deadline
 * plus a generous slack, whatever the server does): behaviour of the client, not a benchmark.
 */

const ROOT = join(__dirname, '..', '..');
const CLIENT = join(ROOT, 'clients', 'ruby');
const VECTOR = JSON.parse(readFileSync(join(ROOT, 'test', 'fixtures', 'internal-api-token-vector.json'), 'utf8')) as {
  secret_base64: string;
  issuer: string;
  iat: number;
  header: string;
};

/** A Ruby group that hangs is killed before jest gives up on the test, so its output says where it hung. */
const RUBY_TIMEOUT_MS = 50_000;
const GROUP_TIMEOUT_MS = 60_000;

interface MinitestRun {
  readonly runs: number;
  readonly failures: number;
  readonly errors: number;
  readonly skips: number;
}

/** Runs minitest files in one Ruby process; throws with Ruby's whole output unless every test passed. */
function minitest(files: readonly string[], env: Record<string, string> = {}): Promise<MinitestRun> {
  return new Promise((resolve, reject) => {
    execFile(
      'ruby',
      ['-Ilib', '-Itest', 'test/run.rb', ...files, '--', '--verbose'],
      { cwd: CLIENT, env: { PATH: process.env.PATH, LANG: 'C.UTF-8', ...env }, timeout: RUBY_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const output = `${stdout}${stderr}`;
        const summary = output.match(/(\d+) runs, \d+ assertions, (\d+) failures, (\d+) errors, (\d+) skips/);
        if (error !== null || summary === null) {
          reject(new Error(`minitest ${files.join(' ')} failed (${error?.message ?? 'no summary'}):\n${output}`));
          return;
        }
        const [runs, failures, errors, skips] = summary.slice(1).map(Number);
        resolve({ runs, failures, errors, skips });
      },
    );
  });
}

/** Every Ruby test the group's files define ran and passed, none skipped: a test that failed to load is missed too. */
async function expectAllPass(files: readonly string[], env?: Record<string, string>): Promise<void> {
  const defined = files.reduce((count, file) => count + (readFileSync(join(CLIENT, file), 'utf8').match(/^\s*def test_/gm) ?? []).length, 0);
  expect(defined).toBeGreaterThan(0);
  expect(await minitest(files, env)).toEqual({ runs: defined, failures: 0, errors: 0, skips: 0 });
}

describe('the shared internal-API token vector (test/fixtures/internal-api-token-vector.json)', () => {
  const secret = Buffer.from(VECTOR.secret_base64, 'base64');

  it('is the header the Node signer makes from its secret, issuer and issue time', async () => {
    jest.useFakeTimers({ now: VECTOR.iat * 1000 + 400, doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask'] });
    try {
      expect(await signInternalApiToken(secret, VECTOR.issuer)).toBe(VECTOR.header);
    } finally {
      jest.useRealTimers();
    }
  });

  it('is accepted by the service verifier within its 60 s, and refused as expired after', async () => {
    const at = (seconds: number) => new InternalApiTokenVerifier(secret, ['gitlab'], () => (VECTOR.iat + seconds) * 1000).refusal(VECTOR.header);
    expect(await at(59)).toBeUndefined();
    expect(await at(60)).toEqual(expect.objectContaining({ error: 'expired gitlab-ci-telemetry-api-request token' }));
    expect(await new InternalApiTokenVerifier(Buffer.alloc(32, 9), ['gitlab'], () => VECTOR.iat * 1000).refusal(VECTOR.header)).toEqual(
      expect.objectContaining({ error: 'invalid gitlab-ci-telemetry-api-request token' }),
    );
  });
});

describe('the Ruby client (clients/ruby)', () => {
  let service: ServiceProcess;
  let misbehaving: MisbehavingServer;
  let env: Record<string, string>;

  beforeAll(async () => {
    // Telemetry for project 7 only: the Ruby tests use project 8 for a job the flag leaves out.
    const flagsFile = writeFlagsFile({ constraints: [{ contextName: 'projectId', operator: 'IN', values: ['7'] }] });
    service = await startService({ FLAGS_FILE: flagsFile });
    misbehaving = await startMisbehavingServer(service.url);
    env = {
      CJT_SERVICE_URL: service.url,
      CJT_SECRET_FILE: service.secrets.internalApiSecretFile,
      CJT_MISBEHAVING_URL: misbehaving.url,
      // Nothing listens there: freePort hands out a port no server of this run takes.
      CJT_DOWN_URL: `http://127.0.0.1:${await freePort()}`,
    };
  }, 60_000);

  afterAll(async () => {
    await misbehaving?.close();
    await service?.stop('SIGKILL');
  });

  it(
    'signs the shared vector byte for byte, and its breaker, answer checks and failing open hold without a service',
    async () => {
      await expectAllPass(['test/internal_api_token_test.rb', 'test/breaker_test.rb', 'test/answer_test.rb', 'test/client_test.rb']);
    },
    GROUP_TIMEOUT_MS,
  );

  it(
    'gets a decorated payload from the real service; a job the flag leaves out and a wrong secret come back untouched',
    async () => {
      await expectAllPass(['test/service/decorate_test.rb'], env);
    },
    GROUP_TIMEOUT_MS,
  );

  it(
    'returns the payload untouched within its deadline when the service is down, stalls, trickles, or answers 500, garbage or another job',
    async () => {
      await expectAllPass(['test/service/failures_test.rb'], env);
    },
    GROUP_TIMEOUT_MS,
  );

  it(
    'opens its breaker on failures, sends nothing while open, probes once after the cool-off and closes when the service is back',
    async () => {
      await expectAllPass(['test/service/breaker_service_test.rb'], env);
    },
    GROUP_TIMEOUT_MS,
  );

  it(
    'serves 16 threads at once, each its own job, over kept-alive connections',
    async () => {
      await expectAllPass(['test/service/threads_test.rb'], env);
    },
    GROUP_TIMEOUT_MS,
  );
});

describe("the Ruby client's reads (SPEC §12, §13)", () => {
  let service: ServiceProcess;
  let misbehaving: MisbehavingServer;
  let env: Record<string, string>;

  beforeAll(async () => {
    // The read API's own world (test/helpers/reads-cases.ts) and the reads across pipelines' (projects 71 and 72),
    // in the embedded collector's files the service reads.
    const dataDir = mkdtempSync(join(tmpdir(), 'cjt-ruby-reads-'));
    const world = readsWorld();
    const across = acrossWorld();
    writeCollectorFiles(dataDir, [...world.exports, ...across.exports]);
    service = await startService({ DATA_DIR: dataDir });
    misbehaving = await startMisbehavingServer(service.url);
    env = {
      CJT_SERVICE_URL: service.url,
      CJT_SECRET_FILE: service.secrets.internalApiSecretFile,
      CJT_MISBEHAVING_URL: misbehaving.url,
      CJT_DOWN_URL: `http://127.0.0.1:${await freePort()}`,
      CJT_PIPELINE_CREATED_AT: new Date(world.pipeline.createdAt).toISOString(),
      CJT_ACROSS_FROM: across.from,
      CJT_ACROSS_TO: across.to,
    };
  }, 60_000);

  afterAll(async () => {
    await misbehaving?.close();
    await service?.stop('SIGKILL');
  });

  it(
    "reads a pipeline's trace, a job's, the critical path and the jobs summary; a failed read returns nothing with its reason, in time",
    async () => {
      await expectAllPass(['test/service/reads_test.rb'], env);
    },
    GROUP_TIMEOUT_MS,
  );

  it(
    'compares a pipeline, finds the regression, the waste, the queue and a what-if across pipelines; 404 across projects, 422 with nothing to compare, a failed read in time',
    async () => {
      await expectAllPass(['test/service/across_test.rb'], env);
    },
    GROUP_TIMEOUT_MS,
  );
});

interface MisbehavingServer {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * A decorator's answer made by hand, wrong in one way (another job's, or dropping a variable that is not the
 * decorator's), in the shape the client asked for: the payload, or with `Prefer: return=minimal` the changes to it.
 */
function forgedAnswer(body: string, changesAsked: boolean, wrong: 'other-job' | 'lost-variables'): string {
  const request = JSON.parse(body) as { job: { id: number }; payload?: Record<string, unknown> };
  const traceparent = '00-0123456789abcdef0123456789abcdef-0123456789abcdef-03';
  const telemetry = { enabled: true, reason: 'enabled' };
  const added = { key: 'TRACEPARENT', value: traceparent, public: true, masked: false };
  if (changesAsked) {
    const remove = wrong === 'lost-variables' ? ['TRACEPARENT', 'SECRET'] : ['TRACEPARENT'];
    const changes = { variables: { remove, append: [added] }, features: { tracing: { traceparent } } };
    return JSON.stringify({ job_id: request.job.id + (wrong === 'other-job' ? 1 : 0), changes, telemetry });
  }
  const payload = request.payload ?? {};
  const variables = [...((payload.variables as { key: string }[] | undefined) ?? []), added];
  const decorated = { ...payload, variables, features: { ...(payload.features as object), tracing: { traceparent } } };
  const answered =
    wrong === 'other-job' ? { ...decorated, id: Number(payload.id) + 1 } : { ...decorated, variables: variables.filter((v) => v.key !== 'SECRET') };
  return JSON.stringify({ payload: answered, telemetry });
}

/**
 * One server for every way a service can fail the client, by path prefix (the client keeps a base URL's path):
 * `/<behaviour>/internal/ci/telemetry/job_payload`. `/proxy` passes calls to the real service; `/switch` does
 * what `/switch/-/mode` was last told (500, slow-500, proxy) and counts the calls that reach it.
 * `/-/connections` counts the connections that carried a client's call, to show keep-alive; `/-/last-request-bytes`
 * is the size of the last call's body, to show what the client sends.
 */
async function startMisbehavingServer(serviceUrl: string): Promise<MisbehavingServer> {
  let connections = 0;
  let lastRequestBytes = 0;
  let switchMode = '500';
  let switchCalls = 0;
  const sockets = new Set<Socket>();
  // The connections that carried a client's call (not the tests' own questions to this server).
  const clientSockets = new WeakSet<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const later = (ms: number, action: () => void) => {
    const timer = setTimeout(() => (timers.delete(timer), action()), ms);
    timers.add(timer);
  };

  const proxy = (request: IncomingMessage, body: string, response: ServerResponse, path: string) => {
    const { host: _host, ...headers } = request.headers;
    const upstream = httpRequest(`${serviceUrl}${path}`, { method: request.method, headers }, (answer) => {
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(response);
    });
    upstream.on('error', () => response.destroy());
    upstream.end(body);
  };

  const behave = (behaviour: string, request: IncomingMessage, body: string, response: ServerResponse, rest: string) => {
    const json = (status: number, text: string) => response.writeHead(status, { 'content-type': 'application/json' }).end(text);
    switch (behaviour) {
      case 'proxy':
        return proxy(request, body, response, rest);
      case '500':
        return json(500, '{"statusCode":500,"error":"Internal Server Error","message":"boom"}');
      case 'slow-500':
        return later(500, () => json(500, '{"statusCode":500,"error":"Internal Server Error"}'));
      case 'reset':
        return request.socket.destroy();
      case 'stall-before-answer':
        return;
      case 'stall-mid-answer':
        response.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length + 1000) });
        response.write('{"payload":{"id":');
        return;
      case 'trickle': {
        // Below HTTP: the status line and one header, then a byte of it every 20 ms, for ever.
        request.socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-trickle: ');
        const drip = setInterval(() => request.socket.write('a'), 20);
        request.socket.once('close', () => clearInterval(drip));
        return;
      }
      case 'garbage':
        return json(200, '<html><body>502 Bad Gateway</body></html>');
      case 'not-http':
        return request.socket.end('SSH-2.0-OpenSSH_9.2p1\r\n');
      case 'huge':
        response.writeHead(200, { 'content-type': 'application/json', 'content-length': String(64 * 1024 * 1024) });
        response.write(`{"payload":{"id":1,"x":"${'x'.repeat(256 * 1024)}`);
        return;
      case 'other-job':
      case 'lost-variables':
        return json(200, forgedAnswer(body, request.headers.prefer === 'return=minimal', behaviour));
      case 'unavailable':
        // What the read API answers when its store cannot answer in time (SPEC §12).
        return response
          .writeHead(503, { 'content-type': 'application/json', 'retry-after': '7' })
          .end('{"statusCode":503,"error":"traces cannot be read right now"}');
      default:
        return json(404, '{"error":"no such behaviour"}');
    }
  };

  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      const url = request.url ?? '/';
      if (url === '/-/connections') return void response.end(String(connections));
      if (url === '/-/last-request-bytes') return void response.end(String(lastRequestBytes));
      if (url === '/switch/-/mode') return void ((switchMode = body), response.end(switchMode));
      if (url === '/switch/-/count') return void response.end(String(switchCalls));
      const [, behaviour, ...rest] = url.split('/');
      const path = `/${rest.join('/')}`;
      lastRequestBytes = Buffer.byteLength(body);
      if (!clientSockets.has(request.socket)) {
        clientSockets.add(request.socket);
        connections++;
      }
      if (behaviour === 'switch') {
        switchCalls++;
        return behave(switchMode, request, body, response, path);
      }
      behave(behaviour, request, body, response, path);
    });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      for (const timer of timers) clearTimeout(timer);
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
