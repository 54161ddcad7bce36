import type { Client } from '@modelcontextprotocol/sdk/client/index.js';

/**
 * A scripted agent (issue 59): no model, a fixed sequence of MCP tool calls that answers "why was this pipeline
 * slower?" from the first field of each answer only, as the tool contract promises that field is the finding an
 * agent acts on. It asks `compare_pipeline` for the pipeline's cause; when the cause is the queue, it asks
 * `runner_queue_health` which tag set waited longest while the pipeline ran. Nothing else of either answer is read.
 */

/** What a user would ask about: a pipeline of a project, and when it was created (GitLab's pipeline page shows it). */
export interface SlowPipelineQuestion {
  readonly projectId: number;
  readonly pipelineId: number;
  /** ISO 8601: the queue health read starts here, so it is about the time the pipeline ran. */
  readonly pipelineCreatedAt: string;
}

/** The agent's answer: the part of the critical path that changed most, on which job, and for the queue, which runners. */
export interface Diagnosis {
  readonly part: string;
  readonly job: string | null;
  readonly stage: string | null;
  /** The cause's seconds as compare_pipeline said them (its change in the path's time). */
  readonly seconds: number;
  /** For a queue cause: the tag set whose queue wait was longest (the reads' form, sorted and joined by ','). */
  readonly tags?: string;
}

/** A tool's answer whose first field is not what the contract names, or a tool error. */
export class AgentStuck extends Error {}

interface Cause {
  readonly part: string;
  readonly job: string | null;
  readonly stage: string | null;
  readonly seconds: number;
}

interface LongestWait {
  readonly tags: string;
}

/** The first field of a tool's structured answer, which must be `key`. */
async function firstField<T>(client: Client, tool: string, args: Record<string, unknown>, key: string): Promise<T | null> {
  const result = await client.callTool({ name: tool, arguments: args });
  if (result.isError === true) {
    const text = (result.content as Array<{ type: string; text?: string }>).find((item) => item.type === 'text')?.text;
    throw new AgentStuck(`${tool}: ${text ?? 'a tool error without text'}`);
  }
  const structured = result.structuredContent as Record<string, unknown> | undefined;
  if (structured === undefined) throw new AgentStuck(`${tool}: no structuredContent`);
  const [first] = Object.keys(structured);
  if (first !== key) throw new AgentStuck(`${tool}: the first field is ${first ?? 'missing'}, not ${key}`);
  return structured[key] as T | null;
}

/** Runs the fixed sequence; null when compare_pipeline names no cause. */
export async function diagnoseSlowPipeline(client: Client, question: SlowPipelineQuestion): Promise<Diagnosis | null> {
  const cause = await firstField<Cause>(client, 'compare_pipeline', { project_id: question.projectId, pipeline_id: question.pipelineId }, 'cause');
  if (cause === null) return null;
  const diagnosis: Diagnosis = { part: cause.part, job: cause.job, stage: cause.stage, seconds: cause.seconds };
  if (cause.part !== 'queue') return diagnosis;
  const longest = await firstField<LongestWait>(
    client,
    'runner_queue_health',
    { project_id: question.projectId, from: question.pipelineCreatedAt },
    'longest_wait',
  );
  return longest === null ? diagnosis : { ...diagnosis, tags: longest.tags };
}
