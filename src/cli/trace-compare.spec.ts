import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PipelineTrace } from '../../test/helpers/pipeline-trace';
import { writeCollectorFiles } from '../../test/helpers/reads-cases';
import { ACROSS_PROJECT, acrossWorld } from '../../test/suites/across-endpoints.suite';
import { formatChange } from './comparison';
import { traceCommand } from './trace-command';

/**
 * `npm run -s trace -- --compare <pipeline id>` (SPEC §13): what a person reads under the waterfall, from the embedded
 * collector's files. The world is the compare endpoint's (test/suites/across-endpoints.suite.ts): project 71's 30
 * pipelines on main, 71000 to 71029, whose `test` restores its cache 60 s longer from 71015 on; and a small one of
 * its own where a job came and one went.
 */

interface Run {
  readonly status: number;
  readonly out: string;
  readonly err: string;
}

async function trace(dataDir: string, ...args: string[]): Promise<Run> {
  let out = '';
  let err = '';
  const status = await traceCommand(args, { DATA_DIR: dataDir }, { out: (text) => (out += text), err: (text) => (err += text) });
  return { status, out, err };
}

/** The signed change a line ends or starts with, in ms: `+1m 00.5s` is 60,500. */
function millisOf(text: string): number {
  const match = text.match(/([+-]?)(?:(\d+)m )?(\d+(?:\.\d+)?)s/)!;
  const value = Math.round((Number(match[2] ?? 0) * 60 + Number(match[3])) * 1000);
  return match[1] === '-' ? -value : value;
}

/** The lines under `heading`, up to the next line that is not indented. */
function section(out: string, heading: string): string[] {
  const lines = out.split('\n');
  const start = lines.findIndex((line) => line.startsWith(heading));
  expect(start).toBeGreaterThanOrEqual(0);
  const rest = lines.slice(start + 1);
  const end = rest.findIndex((line) => !line.startsWith('  '));
  return rest.slice(0, end === -1 ? rest.length : end);
}

describe('`npm run -s trace -- --compare` (SPEC §13)', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cjt-trace-compare-'));
  const slower = ACROSS_PROJECT * 1000 + 20;

  beforeAll(() => {
    // Project 9: pipeline 901 dropped `docs` and gained a slow `e2e` that became its critical path.
    const createdAt = Date.parse(acrossWorld().from) - 86_400_000;
    const before = new PipelineTrace(9, 900, createdAt)
      .job({ jobId: 9001, name: 'build', stage: 'build', queuedAt: 0, pickedUpAt: 2, finishedAt: 30 })
      .job({ jobId: 9002, name: 'test', stage: 'test', queuedAt: 30, pickedUpAt: 31, finishedAt: 90 })
      .job({ jobId: 9003, name: 'docs', stage: 'test', queuedAt: 30, pickedUpAt: 31, finishedAt: 50 })
      .pipeline(900, { status: 'success', finishedAt: 91, ref: 'main', source: 'push' });
    const after = new PipelineTrace(9, 901, createdAt + 3_600_000)
      .job({ jobId: 9011, name: 'build', stage: 'build', queuedAt: 0, pickedUpAt: 2, finishedAt: 30 })
      .job({ jobId: 9012, name: 'test', stage: 'test', queuedAt: 30, pickedUpAt: 31, finishedAt: 90 })
      .job({ jobId: 9013, name: 'e2e', stage: 'test', queuedAt: 30, pickedUpAt: 45, finishedAt: 200 })
      .pipeline(901, { status: 'success', finishedAt: 201, ref: 'main', source: 'push' });
    writeCollectorFiles(dataDir, [...acrossWorld().exports, ...before.resourceSpans(), ...after.resourceSpans()]);
  });

  it("prints the pipeline's waterfall, then its baseline and why, the delta by part largest first adding up to it, the jobs that changed most", async () => {
    const run = await trace(dataDir, '--compare', String(slower));
    expect([run.status, run.err]).toEqual([0, '']);
    const lines = run.out.split('\n');
    expect(lines[0]).toMatch(/^trace [0-9a-f]{32}: \d+ spans, /);
    expect(lines.find((line) => line.startsWith(`pipeline ${slower} success`))).toBeDefined();
    expect(lines.find((line) => /^ {2}job \d+ test success .*◀ critical path, after job \d+ build$/.test(line))).toBeDefined();
    expect(lines.find((line) => line.startsWith('on the critical path ('))).toBeDefined();

    expect(run.out).toMatch(
      new RegExp(
        `\\npipeline ${slower} compared with pipeline 710(0\\d|1[0-4]): the median critical path \\([\\d.]+ s\\) of the last 20 ended push pipelines of main before pipeline ${slower}\\n`,
      ),
    );
    const headline = lines.find((line) => line.startsWith('critical path '))!;
    expect(headline).toMatch(/^critical path \d+m \d{2}s against \d+m \d{2}s: [+-]/);
    const delta = millisOf(headline.slice(headline.lastIndexOf(': ')));

    const parts = section(run.out, 'by part, largest first:');
    expect(parts[0]).toMatch(/^ +\+1m 00s {2}restoring caches$/);
    const sizes = parts.slice(0, -1).map((line) => Math.abs(millisOf(line)));
    expect(sizes).toEqual([...sizes].sort((a, b) => b - a));
    // The sum is shown, equals the delta, and is what the parts above it add up to, to the millisecond.
    expect(parts[parts.length - 1]).toMatch(/^ +[+-]?[\dm .]+s {2}= the change in the critical path$/);
    expect(millisOf(parts[parts.length - 1])).toBe(delta);
    expect(parts.slice(0, -1).reduce((sum, line) => sum + millisOf(line), 0)).toBe(delta);

    const jobs = section(run.out, 'jobs that changed most');
    expect(jobs[0]).toMatch(/^ +\+1m \d{2}(\.\d+)?s {2}test \(stage test\), on the critical path in both$/);
    expect(lines[lines.length - 2]).toBe('added: none; gone: none');
  });

  it('compares with the baseline named', async () => {
    const run = await trace(dataDir, '--compare', String(slower), '--baseline', String(ACROSS_PROJECT * 1000 + 2), '--project', String(ACROSS_PROJECT));
    expect(run.status).toBe(0);
    expect(run.out).toContain(`\npipeline ${slower} compared with pipeline ${ACROSS_PROJECT * 1000 + 2}, as asked\n`);
    expect(section(run.out, 'by part, largest first:')[0]).toMatch(/^ +\+1m 00s {2}restoring caches$/);
  });

  it('names the jobs added and gone, and the time of a job that moved onto the path as the path moving', async () => {
    const run = await trace(dataDir, '--compare', '901', '--baseline', '900');
    expect(run.status).toBe(0);
    // Its path: build (30 s from the pipeline's creation) then e2e (170 s from pending to its end), against build then test (60 s).
    expect(run.out).toContain('\ncritical path 3m 20s against 1m 30s: +1m 50s\n');
    expect(section(run.out, 'by part, largest first:')).toEqual([
      '  +1m 50s  on jobs on only one of the two critical paths',
      '  +1m 50s  = the change in the critical path',
    ]);
    expect(section(run.out, 'jobs that changed most')).toEqual([
      '  +2m 50s  e2e (stage test), now on the critical path',
      '     -20s  docs (stage test), off the critical path',
    ]);
    expect(run.out).toMatch(/\nadded: e2e; gone: docs\n$/);
  });

  it('says there is nothing to compare the first pipeline with, and exits non-zero', async () => {
    const run = await trace(dataDir, '--compare', String(ACROSS_PROJECT * 1000));
    expect(run.status).toBe(1);
    expect(run.out).toBe('');
    expect(run.err).toBe(
      `pipeline ${ACROSS_PROJECT * 1000} cannot be compared: no ended pipeline of the same ref and source before pipeline ${ACROSS_PROJECT * 1000} to compare with; name one as baseline (--baseline <pipeline id>)\n`,
    );
  });

  it("does not find another project's pipeline or baseline, nor one it does not hold", async () => {
    const foreign = await trace(dataDir, '--compare', '72020', '--project', String(ACROSS_PROJECT));
    expect([foreign.status, foreign.err]).toEqual([1, expect.stringMatching(/^no pipeline 72020 of project 71 in .*traces\.jsonl\n$/)]);
    const foreignBaseline = await trace(dataDir, '--compare', String(slower), '--baseline', '72002');
    expect([foreignBaseline.status, foreignBaseline.err]).toEqual([1, expect.stringMatching(/^no baseline pipeline 72002 of project 71 in /)]);
    const unknown = await trace(dataDir, '--compare', '123456');
    expect([unknown.status, unknown.out, unknown.err]).toEqual([1, '', expect.stringMatching(/^no pipeline 123456 in /)]);
  });

  it('refuses arguments it cannot use, with its usage', async () => {
    for (const args of [['--compare', 'abc'], ['--compare'], ['--baseline', '3'], ['--compare', '5', 'trace-id'], ['--colour']]) {
      const run = await trace(dataDir, ...args);
      expect([run.status, run.out, run.err]).toEqual([64, '', expect.stringContaining('\nusage: npm run -s trace')]);
    }
  });

  it('prints a change signed and to the millisecond', () => {
    expect([60_000, -12_345, 0, 61_500, 5, -3_600_250].map(formatChange)).toEqual(['+1m 00s', '-12.345s', '0s', '+1m 01.5s', '+0.005s', '-60m 00.25s']);
  });
});
