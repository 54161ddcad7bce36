import type { HttpProblem } from '../observability/http-error';
import { WINDOW_TOO_LONG, type FieldProblem } from '../reads/reads-request';

/**
 * A tool's refusal as an MCP tool error (SPEC §14): `isError` with one text whose first word is what the agent can do
 * about it, the contract's prefixes: `invalid_argument: <field>: …` (fix that argument), `window_too_long: …` (ask a
 * shorter window), `not_found: …` (another id, or another project), `unanswerable: …` (nothing recorded answers it),
 * `backend_unavailable: retry after N s` (ask again later). No structured content: the output schema is an answer's.
 */
export type RefusalKind = 'invalid_argument' | 'window_too_long' | 'not_found' | 'unanswerable' | 'backend_unavailable';

export class ToolRefusal extends Error {
  constructor(
    readonly kind: RefusalKind,
    detail: string,
  ) {
    super(`${kind}: ${detail}`);
    this.name = 'ToolRefusal';
  }

  static invalidArgument(field: string, problem: string): ToolRefusal {
    return new ToolRefusal('invalid_argument', `${field}: ${problem}`);
  }
}

/** The read's HTTP problem as the tool's refusal; `fields` renames a read's field to the tool argument it came from. */
export function refusalOf(problem: HttpProblem, fields: Readonly<Record<string, string>> = {}): ToolRefusal {
  switch (problem.status) {
    case 400: {
      const problems = (problem.options.details?.fields ?? []) as FieldProblem[];
      if (problems.some((field) => field.problems.includes(WINDOW_TOO_LONG)))
        return new ToolRefusal('window_too_long', `${WINDOW_TOO_LONG}: ask a shorter from/to`);
      const [first] = problems;
      if (first === undefined) return ToolRefusal.invalidArgument('arguments', problem.message);
      return ToolRefusal.invalidArgument(fields[first.field] ?? first.field, first.problems.join('; '));
    }
    case 404:
      return new ToolRefusal('not_found', problem.message);
    case 422:
      return new ToolRefusal('unanswerable', problem.message);
    case 503:
      return new ToolRefusal('backend_unavailable', `retry after ${problem.options.retryAfterSeconds ?? 1} s: ${problem.message}`);
    default:
      // The reads answer no other status; one that appears is a defect to see, not an agent's to act on.
      throw problem;
  }
}
