import { HttpProblem } from '../observability/http-error';
import { WINDOW_TOO_LONG } from '../reads/reads-request';
import { refusalOf } from './tool-errors';

const badRequest = (fields: Array<{ field: string; problems: string[] }>) => new HttpProblem(400, 'invalid request', { details: { fields } });

describe("a read's refusal as the tool error an agent can act on (SPEC §14)", () => {
  it('names the argument of a 400, by the name the tool gave it', () => {
    expect(
      refusalOf(badRequest([{ field: 'baseline', problems: ['baseline must be a positive integer'] }]), { baseline: 'baseline_pipeline_id' }).message,
    ).toBe('invalid_argument: baseline_pipeline_id: baseline must be a positive integer');
    expect(refusalOf(badRequest([{ field: 'from', problems: ['from must be an RFC 3339 timestamp'] }])).message).toBe(
      'invalid_argument: from: from must be an RFC 3339 timestamp',
    );
  });

  it('says window_too_long for a window past 31 days, whichever end the read blamed', () => {
    for (const field of ['from', 'to']) {
      expect(refusalOf(badRequest([{ field, problems: [WINDOW_TOO_LONG] }])).message).toMatch(/^window_too_long: /);
    }
  });

  it('says not_found, unanswerable, and backend_unavailable with the seconds to wait', () => {
    expect(refusalOf(new HttpProblem(404, 'no pipeline of this project')).message).toBe('not_found: no pipeline of this project');
    expect(refusalOf(new HttpProblem(422, 'no baseline: the first pipeline of its ref')).message).toBe(
      'unanswerable: no baseline: the first pipeline of its ref',
    );
    expect(refusalOf(new HttpProblem(503, 'the trace store did not answer in time', { retryAfterSeconds: 7 })).message).toMatch(
      /^backend_unavailable: retry after 7 s/,
    );
  });
});
