import { RUNNER_PARTS, type RunnerPart } from '../critical-path/critical-path';
import { partsFrom, partsInto, runMs, type JobRunRow } from './job-run';

describe('a job run row', () => {
  // Each part a different power of two, so a part left out or read twice shows in the sum.
  const partsMs = Object.fromEntries(RUNNER_PARTS.map((part, i) => [part, 2 ** i])) as Record<RunnerPart, number>;
  const row = { partsMs } as JobRunRow;

  it("runs for the sum of every part the runner's stages are split into", () => {
    expect(runMs(row)).toBe(2 ** RUNNER_PARTS.length - 1);
  });

  it('lists its parts in the order of RUNNER_PARTS, and reads them back so', () => {
    const values = partsInto(row, new Float64Array(RUNNER_PARTS.length));
    expect([...values]).toEqual(RUNNER_PARTS.map((part) => partsMs[part]));
    expect(partsFrom([7, ...values], 1)).toEqual(partsMs);
    expect(partsFrom([])).toEqual(Object.fromEntries(RUNNER_PARTS.map((part) => [part, 0])));
  });
});
