import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { HttpProblem } from '../observability/http-error';
import type { ReadsService } from '../reads/reads.service';
import { CursorProblem, cursorAt, offsetOf, Page, pageOf, questionDigest, Shaped } from './answer-budget';
import {
  compareAnswer,
  compareOutput,
  criticalPathAnswer,
  criticalPathOutput,
  jobTraceAnswer,
  jobTraceOutput,
  regressionsAnswer,
  regressionsOutput,
  runnerQueueAnswer,
  runnerQueueOutput,
  slowestJobsAnswer,
  slowestJobsOutput,
  wasteAnswer,
  wasteOutput,
  whatIfAnswer,
  whatIfOutput,
} from './tool-answers';
import { refusalOf, ToolRefusal } from './tool-errors';

/**
 * The MCP tools (SPEC §14, the tool contract in docs/mcp.md): each one read of ReadsService, asked exactly as the
 * HTTP read is (the same checks, the same worker pool and deadline, the same project scoping), its answer reshaped
 * for an agent (tool-answers.ts) and cut to the answer budget (answer-budget.ts).
 */

const id = (what: string) => z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).describe(`The ${what} id, as GitLab numbers it`);
const projectId = id('GitLab project').describe('The GitLab project id: every answer is of this project only');
const from = z.string().optional().describe('Start of the window, RFC 3339 (2026-11-25T10:00:00Z); default: 31 days before `to`. A window is at most 31 days');
const to = z.string().optional().describe('End of the window, RFC 3339; default: now');
const ref = z.string().optional().describe('Only pipelines of this branch or tag');
const cursor = z.string().optional().describe('`next_cursor` of the previous answer, with the same other arguments: the rest of its list');

type Args = Record<string, unknown> & { project_id: number; cursor?: string };
type Query = Record<string, string | number>;

/** A read's query or body without the arguments not given. */
function given(values: Record<string, string | number | undefined>): Query {
  return Object.fromEntries(Object.entries(values).filter(([, value]) => value !== undefined)) as Query;
}

interface ToolDefinition {
  readonly name: string;
  readonly title: string;
  readonly description: string;
  readonly input: z.ZodObject;
  readonly output: z.ZodObject;
  /** A read's field named otherwise than the tool's argument it came from. */
  readonly fields?: Readonly<Record<string, string>>;
  read(reads: ReadsService, args: Args): Promise<Buffer>;
  shape(answer: never, args: Args): Shaped;
  /** The answer's one or two sentences, beside its structured content. */
  summary(page: Page): string;
}

const at = (page: Page, key: string) => page[key] as Record<string, never> | null;
const project = (args: Args) => ({ project_id: String(args.project_id) });
const window = (args: Args) => given({ from: args.from as string | undefined, to: args.to as string | undefined });
const tagsWord = (tags: string) => (tags === '' ? 'untagged runners' : `runners tagged ${tags}`);

export const TOOLS: readonly ToolDefinition[] = [
  {
    name: 'pipeline_critical_path',
    title: "A pipeline's critical path",
    description:
      "Why a pipeline took as long as it did: the chain of jobs that held it up, each job's time split into GitLab's delay, queue wait and the runner's stages. `longest` is the largest part of one job's time on the path.",
    input: z.object({ project_id: projectId, pipeline_id: id('pipeline'), cursor }),
    output: criticalPathOutput,
    read: (reads, args) => reads.criticalPath({ ...project(args), pipeline_id: String(args.pipeline_id) }, {}),
    shape: criticalPathAnswer,
    summary: (page) => {
      const longest = at(page, 'longest');
      return longest === null
        ? 'The pipeline has no critical path yet (no job has ended).'
        : `The largest part of the ${page.duration_seconds} s path is ${longest.job ?? `job ${longest.job_id}`}'s ${longest.part}: ${longest.seconds} s.`;
    },
  },
  {
    name: 'job_trace_summary',
    title: "A job's trace, summarised",
    description:
      "A job's trace without the raw spans: its status and failure reason, queue wait, the runner's stages, error spans and the slowest spans; the spans themselves are listed (longest first) page by page with the cursor. `slowest_stage` is the runner stage that took longest.",
    input: z.object({ project_id: projectId, job_id: id('job'), cursor }),
    output: jobTraceOutput,
    read: (reads, args) => reads.jobTrace({ ...project(args), job_id: String(args.job_id) }, {}),
    shape: (answer, args) => jobTraceAnswer(answer, args.job_id as number),
    summary: (page) => {
      const slowest = at(page, 'slowest_stage');
      const stage = slowest === null ? 'No runner stages were recorded' : `The slowest runner stage is ${slowest.stage}: ${slowest.seconds} s`;
      return `${stage}; job status ${page.status ?? 'unknown'}${page.failure_reason === null ? '' : ` (${page.failure_reason})`}.`;
    },
  },
  {
    name: 'compare_pipeline',
    title: 'A pipeline against its baseline',
    description:
      "What made a pipeline slower or faster than its baseline (by default the median of its ref's last 20 ended pipelines): the change in its critical path split exactly into GitLab's delay, queue wait, each runner stage, other waits and `path_moved`, and the jobs that changed most. `cause` is the part with the most seconds, pinned to the path job that changed most with it.",
    input: z.object({ project_id: projectId, pipeline_id: id('pipeline'), baseline_pipeline_id: id('baseline pipeline').optional(), cursor }),
    output: compareOutput,
    fields: { baseline: 'baseline_pipeline_id' },
    read: (reads, args) =>
      reads.compare(
        { ...project(args), pipeline_id: String(args.pipeline_id) },
        given({ baseline: args.baseline_pipeline_id === undefined ? undefined : String(args.baseline_pipeline_id) }),
      ),
    shape: compareAnswer,
    summary: (page) => {
      const cause = at(page, 'cause');
      const baseline = at(page, 'baseline')!;
      if (cause === null) return `No change in the critical path against ${baseline.description}.`;
      const sign = (value: number) => (value > 0 ? `+${value}` : `${value}`);
      return `${cause.part}${cause.job === null ? '' : ` of ${cause.job}`} accounts for ${sign(cause.seconds)} s of the ${sign(page.duration_delta_seconds as number)} s change against ${baseline.description}.`;
    },
  },
  {
    name: 'list_regressions',
    title: 'What got slower, and since when',
    description:
      "Change points over a window where a job's runner stage (or the pipeline's critical path) stepped up, each named by the first pipeline, commit and ref it shows in; no change point where there was only noise. `largest` is the step up with the most seconds.",
    input: z.object({ project_id: projectId, from, to, ref, cursor }),
    output: regressionsOutput,
    read: (reads, args) => reads.regressions(project(args), given({ ...window(args), ref: args.ref as string | undefined })),
    shape: regressionsAnswer,
    summary: (page) => {
      const largest = at(page, 'largest');
      if (largest === null) return `Nothing stepped up over the ${page.pipelines_considered} pipelines of the window.`;
      return `${largest.job ?? 'The critical path'} ${largest.part} went from ${largest.before_seconds} s to ${largest.after_seconds} s, first in pipeline ${largest.first_pipeline_id} (commit ${String(largest.first_sha).slice(0, 8)}).`;
    },
  },
  {
    name: 'list_waste',
    title: 'Runner time and waiting wasted',
    description:
      'Per job over a window: runner time of retried attempts, flaky runs (two outcomes on one commit), cache restore and archive time, and queue wait, largest first. `largest` is the one job and kind of waste with the most seconds.',
    input: z.object({ project_id: projectId, from, to, cursor }),
    output: wasteOutput,
    read: (reads, args) => reads.waste(project(args), window(args)),
    shape: wasteAnswer,
    summary: (page) => {
      const largest = at(page, 'largest');
      return largest === null
        ? `Nothing was wasted over the ${page.pipelines_considered} pipelines of the window.`
        : `The largest waste is ${largest.job}'s ${largest.kind}: ${largest.seconds} s over ${page.pipelines_considered} pipelines.`;
    },
  },
  {
    name: 'runner_queue_health',
    title: 'Queue wait by runner tag set',
    description:
      'How long jobs waited for a runner over a window, per runner tag set (p50, p95, the most waiting at once, the worst hour or day). `longest_wait` is the tag set with the longest p95 wait.',
    input: z.object({ project_id: projectId, from, to, cursor }),
    output: runnerQueueOutput,
    read: (reads, args) => reads.runnerQueue(project(args), window(args)),
    shape: runnerQueueAnswer,
    summary: (page) => {
      const longest = at(page, 'longest_wait');
      return longest === null
        ? 'No job waited for a runner in the window.'
        : `Jobs for ${tagsWord(longest.tags)} waited longest: p95 ${longest.p95_seconds} s, p50 ${longest.p50_seconds} s.`;
    },
  },
  {
    name: 'runner_what_if',
    title: 'What more runners would change',
    description:
      "Replays a window's recorded jobs of one runner tag set on the runners it had and on `runners` more (negative: fewer), and says what the queue wait and the pipelines' critical paths would have been. `effect` is the p95 queue wait before and after.",
    input: z.object({
      project_id: projectId,
      tags: z.string().describe("The runner tag set, tags joined by commas (docker,arm64); '' for untagged runners"),
      runners: z.number().int().describe('Runners added (negative: taken away), at most 1000 either way'),
      from,
      to,
      cursor,
    }),
    output: whatIfOutput,
    read: (reads, args) => reads.whatIf(project(args), { tags: args.tags, runners: args.runners, ...window(args) }),
    shape: whatIfAnswer,
    summary: (page) => {
      const effect = at(page, 'effect')!;
      const added = effect.runners_added as number;
      const count = Math.abs(added);
      const runners = `${count} ${added >= 0 ? 'more' : 'fewer'} ${count === 1 ? 'runner' : 'runners'}`;
      const tagged = effect.tags === '' ? ' without tags' : ` tagged ${effect.tags}`;
      return `With ${runners}${tagged}, the p95 queue wait would have been ${effect.queue_p95_after_seconds} s instead of ${effect.queue_p95_before_seconds} s.`;
    },
  },
  {
    name: 'slowest_jobs',
    title: "A project's slowest and flakiest jobs",
    description:
      'Per job name over a window: runs, failures, retries, p50/p95 duration and queue wait, and how often the job was on its pipeline’s critical path, slowest (p95) first. `slowest` is the job name with the longest p95 duration.',
    input: z.object({ project_id: projectId, from, to, ref, cursor }),
    output: slowestJobsOutput,
    read: (reads, args) => reads.jobs(project(args), given({ ...window(args), ref: args.ref as string | undefined })),
    shape: slowestJobsAnswer,
    summary: (page) => {
      const slowest = at(page, 'slowest');
      return slowest === null ? 'No job ran in the window.' : `The slowest job is ${slowest.job}: p95 ${slowest.p95_seconds} s.`;
    },
  },
];

/**
 * What tools/list declares as a tool's input schema: the strict schema's own JSON Schema, on a schema the SDK
 * parses anything with. The SDK would refuse a bad argument itself, but in words of its own
 * ("MCP error -32602: Input validation error: …"); the tool checks it with the strict schema instead, so an agent
 * reads `invalid_argument: <field>: …` like every other refusal.
 */
function declared(input: z.ZodObject): z.ZodType {
  const { $schema: _dialect, ...schema } = z.toJSONSchema(input, { io: 'input', target: 'draft-7' });
  return z.looseObject({}).meta(schema);
}

function refused(refusal: ToolRefusal): CallToolResult {
  return { content: [{ type: 'text', text: refusal.message }], isError: true };
}

/** One tool call: check the arguments, ask the read, shape and page its answer; every refusal as a tool error. */
async function call(tool: ToolDefinition, reads: ReadsService, budget: number, given: unknown): Promise<CallToolResult> {
  const parsed = tool.input.safeParse(given);
  if (!parsed.success) {
    const [issue] = parsed.error.issues;
    return refused(ToolRefusal.invalidArgument(String(issue.path[0] ?? 'arguments'), issue.message));
  }
  const args = parsed.data as Args;
  const question = questionDigest(tool.name, args);
  let offset: number;
  try {
    offset = offsetOf(args.cursor, question);
  } catch (error) {
    if (error instanceof CursorProblem) return refused(ToolRefusal.invalidArgument('cursor', error.message));
    throw error;
  }
  let body: Buffer;
  try {
    body = await tool.read(reads, args);
  } catch (error) {
    if (error instanceof HttpProblem) return refused(refusalOf(error, tool.fields));
    throw error;
  }
  const page = pageOf(tool.shape(JSON.parse(body.toString('utf8')) as never, args), offset, budget, (next) => cursorAt(next, question));
  const listed = page.next_cursor === null ? '' : ' More are listed with next_cursor.';
  return { content: [{ type: 'text', text: `${tool.summary(page)}${listed}` }], structuredContent: page };
}

const INSTRUCTIONS =
  "Read-only answers about one GitLab project's CI pipelines, from their traces: why a pipeline was slow, what got slower, what is wasted, whether runners are short. Every tool names the project; the first key of every answer is its finding. Long lists come in pages: pass next_cursor back as cursor.";

/** Each tool's declared input schema, converted once: a server is built per request. */
let declaredInputs: ReadonlyMap<string, z.ZodType> | undefined;

/** A server holding the tools over `reads`; one per request, the transport being stateless. */
export function mcpServerOver(reads: ReadsService, budget: number): McpServer {
  declaredInputs ??= new Map(TOOLS.map((tool) => [tool.name, declared(tool.input)]));
  const server = new McpServer({ name: 'ci-job-telemetry', version: '0.1.0' }, { capabilities: { tools: {} }, instructions: INSTRUCTIONS });
  for (const tool of TOOLS) {
    server.registerTool(
      tool.name,
      {
        title: tool.title,
        description: tool.description,
        inputSchema: declaredInputs.get(tool.name)!,
        outputSchema: tool.output,
        annotations: { title: tool.title, readOnlyHint: true, idempotentHint: true, openWorldHint: false, destructiveHint: false },
      },
      (args: unknown) => call(tool, reads, budget, args),
    );
  }
  return server;
}
