import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InjectedCause, injectedCauseWorld, InjectedCauseWorld, INJECTED_SECONDS } from '../helpers/injected-cause';
import { mcpClient } from '../helpers/mcp-client';
import { writeCollectorFiles } from '../helpers/reads-cases';
import { Diagnosis, diagnoseSlowPipeline } from '../helpers/scripted-agent';
import { ServiceProcess, startService } from '../helpers/service';

/**
 * Issue 59's scripted agent against the built service on its embedded defaults: for seeds 1 to 20, one project's
 * pipelines with one cause injected into the last (a slower runner stage, a longer queue on one tag set, a retry;
 * test/helpers/injected-cause.ts), read by the SDK's own client over Streamable HTTP through the MCP endpoint, as
 * an agent would ask. The agent names the cause from the first field of the tools' answers only; at least 19 of the
 * 20 seeds must be named right (part and job, and the tag set for a queue). The same worlds without the cause are
 * the control: there the agent must not find what was injected, or the figure would say nothing of the tools.
 */

const SEEDS = Array.from({ length: 20 }, (_, i) => i + 1);
const INJECTED_PROJECT = (seed: number) => 5900 + seed;
const CONTROL_PROJECT = (seed: number) => 5950 + seed;

/** Right when the part and the job are the injected ones, and for a queue the tag set too. */
function named(diagnosis: Diagnosis | null, cause: InjectedCause): boolean {
  if (diagnosis === null || diagnosis.part !== cause.part || diagnosis.job !== cause.job) return false;
  return cause.kind !== 'queue' || diagnosis.tags === cause.tags;
}

const said = (diagnosis: Diagnosis | null) =>
  diagnosis === null
    ? 'no cause'
    : `${diagnosis.part} of ${diagnosis.job ?? '?'} (${diagnosis.seconds} s${diagnosis.tags === undefined ? '' : `, tags ${diagnosis.tags}`})`;
const truth = (cause: InjectedCause) =>
  `${cause.part} of ${cause.job} (+${cause.seconds} s, tags ${cause.tags}${cause.retriedBy === undefined ? '' : `, retried by ${cause.retriedBy}`})`;

describe('a scripted agent names an injected cause through the MCP tools (issue 59)', () => {
  let dataDir: string;
  let service: ServiceProcess;
  const injected = new Map<number, InjectedCauseWorld>();
  const control = new Map<number, InjectedCauseWorld>();

  beforeAll(async () => {
    const now = Date.now();
    for (const seed of SEEDS) {
      injected.set(seed, injectedCauseWorld(seed, { projectId: INJECTED_PROJECT(seed), inject: true, now }));
      control.set(seed, injectedCauseWorld(seed, { projectId: CONTROL_PROJECT(seed), inject: false, now }));
    }
    dataDir = mkdtempSync(join(tmpdir(), 'cjt-mcp-agent-'));
    writeCollectorFiles(
      dataDir,
      [...injected.values(), ...control.values()].flatMap((world) => world.exports),
    );
    service = await startService({ DATA_DIR: dataDir });
    // The internal API's own header, as GitLab sends it to the HTTP reads, signed afresh for every request.
    client = await mcpClient(service.url, service.secrets.internalApiSecret, 'header');
  }, 60_000);

  afterAll(async () => {
    await client?.close();
    await service?.stop();
    if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
  });

  let client: Client;
  const ask = (world: InjectedCauseWorld) =>
    diagnoseSlowPipeline(client, { projectId: world.projectId, pipelineId: world.target.pipelineId, pipelineCreatedAt: world.target.createdAt });

  it('names the injected cause in at least 19 of 20 seeds', async () => {
    const misses: string[] = [];
    let right = 0;
    for (const seed of SEEDS) {
      const world = injected.get(seed)!;
      const diagnosis = await ask(world);
      if (named(diagnosis, world.cause!)) right += 1;
      else misses.push(`seed ${seed}: injected ${truth(world.cause!)}, the agent said ${said(diagnosis)}`);
    }
    process.stdout.write(`scripted agent: ${right}/${SEEDS.length} seeds named the cause${misses.map((miss) => `\n  ${miss}`).join('')}\n`);
    expect(right).toBeGreaterThanOrEqual(19);
  }, 120_000);

  it('finds no cause of an injected size, and not the injected one, in the same worlds without it', async () => {
    const found: string[] = [];
    const large: string[] = [];
    for (const seed of SEEDS) {
      const world = control.get(seed)!;
      const diagnosis = await ask(world);
      if (named(diagnosis, world.wouldInject)) found.push(`seed ${seed}: ${said(diagnosis)}`);
      if (diagnosis !== null && Math.abs(diagnosis.seconds) >= INJECTED_SECONDS.min) large.push(`seed ${seed}: ${said(diagnosis)}`);
    }
    process.stdout.write(
      `scripted agent, control: the injected cause named in ${found.length}/${SEEDS.length} seeds without it, a cause of ${INJECTED_SECONDS.min} s or more in ${large.length}\n`,
    );
    // Noise alone (±10 % on every part) names a job's slower script now and then, never one of an injected size.
    expect(found.length).toBeLessThanOrEqual(4);
    expect(large).toEqual([]);
  }, 120_000);
});
