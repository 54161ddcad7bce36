import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MCP_PATH } from '../../src/mcp/mcp.route';
import { SigningProxy, signingProxy } from '../helpers/mcp-client';
import { ServiceProcess, startService } from '../helpers/service';

/**
 * The MCP conformance suite (@modelcontextprotocol/conformance, pinned in devDependencies) against the built service
 * on its embedded defaults (SPEC §14), offline: its `server` command connects as a client to a URL. It has no option
 * to send a header, so it is pointed at a proxy in this test that signs the internal-API JWT into every request
 * (test/helpers/mcp-client.ts): the suite then sees the server as GitLab's side does.
 *
 * Applicable to a read-only, tools-only, stateless server, and required to pass: server-initialize, ping, tools-list.
 * The rest of the active suite runs too, with a baseline of the scenarios that call the reference server's fixtures
 * or capabilities this server does not declare (test/fixtures/mcp-conformance-baseline.yml, each with its reason).
 */

const CLI = join(__dirname, '..', '..', 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const BASELINE = join(__dirname, '..', 'fixtures', 'mcp-conformance-baseline.yml');
const APPLICABLE = ['server-initialize', 'ping', 'tools-list'];

interface Check {
  readonly id: string;
  readonly status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | 'SKIPPED';
  readonly errorMessage?: string;
}

function conformance(args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, 'server', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH } });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => resolve({ code, output }));
  });
}

/** The checks of every scenario run into `directory` (one `server-<scenario>-<time>/checks.json` each). */
function checksIn(directory: string): Map<string, Check[]> {
  const byScenario = new Map<string, Check[]>();
  for (const run of readdirSync(directory)) {
    const scenario = run.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T.*$/, '');
    byScenario.set(scenario, JSON.parse(readFileSync(join(directory, run, 'checks.json'), 'utf8')) as Check[]);
  }
  return byScenario;
}

describe('the MCP conformance suite against the service (SPEC §14)', () => {
  let service: ServiceProcess;
  let proxy: SigningProxy;

  beforeAll(async () => {
    service = await startService();
    proxy = await signingProxy(`${service.url}${MCP_PATH}`, service.secrets.internalApiSecret);
  }, 60_000);

  afterAll(async () => {
    await proxy?.close();
    await service?.stop();
  });

  it.each(APPLICABLE)('passes %s', async (scenario) => {
    const results = mkdtempSync(join(tmpdir(), 'cjt-conformance-'));
    const { code, output } = await conformance(['--url', proxy.url, '--scenario', scenario, '-o', results]);
    const checks = checksIn(results).get(scenario)!;
    expect(checks.filter((check) => check.status === 'FAILURE')).toEqual([]);
    expect(checks.filter((check) => check.status === 'SUCCESS').length).toBeGreaterThan(0);
    expect([code, output]).toEqual([0, expect.stringMatching(/Passed: [1-9]\d*\/\d+, 0 failed/)]);
  });

  it('fails nothing of the active suite outside the baseline of scenarios that do not apply, and every baseline entry still fails', async () => {
    const results = mkdtempSync(join(tmpdir(), 'cjt-conformance-'));
    const { code, output } = await conformance(['--url', proxy.url, '--expected-failures', BASELINE, '-o', results]);
    expect([code, output]).toEqual([0, expect.stringContaining('SUMMARY')]);
    // The suite's own exit status says it; the checks say it again, scenario by scenario.
    const baseline = readFileSync(BASELINE, 'utf8')
      .split('\n')
      .filter((line) => line.startsWith('  - '))
      .map((line) => line.slice(4).trim());
    for (const [scenario, checks] of checksIn(results)) {
      // As the suite counts them: a warning is not a pass.
      const failed = checks.some((check) => check.status === 'FAILURE' || check.status === 'WARNING');
      expect([scenario, failed]).toEqual([scenario, baseline.includes(scenario)]);
    }
    for (const scenario of APPLICABLE) expect(checksIn(results).has(scenario)).toBe(true);
  }, 60_000);

  it('cannot pass without the JWT the proxy adds: the suite reaches no further than a 401', async () => {
    const results = mkdtempSync(join(tmpdir(), 'cjt-conformance-'));
    const { code } = await conformance(['--url', `${service.url}${MCP_PATH}`, '--scenario', 'server-initialize', '-o', results]);
    expect(code).not.toBe(0);
    expect(
      checksIn(results)
        .get('server-initialize')!
        .map((check) => check.status),
    ).toContain('FAILURE');
  });
});
