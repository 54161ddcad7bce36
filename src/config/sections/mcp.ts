import { Integer, Variable } from '../variable';

/** The MCP server over the reads (SPEC §14). */
export class McpConfig {
  /**
   * The most characters of JSON one tool answer carries: an agent's context is the scarce thing, so a longer list is
   * cut and the rest fetched with the answer's cursor. The smallest still holds a finding and a page of a few items.
   */
  @Variable('MCP_ANSWER_BUDGET') @Integer({ min: 2000, max: 1_000_000 }) readonly answerBudget: number = 8000;
}
