import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RUNNER_PARTS, STAGE_PARTS } from '../critical-path/critical-path';

/**
 * ClickHouse's materialized view files each runner stage under a part of the run by number as it is written
 * (deploy/clickhouse/init), and a read splits a month of runs by those numbers: they must be the walk's own names
 * (src/critical-path), or a restore_cache would be counted as a script on ClickHouse and not on the embedded files.
 */
describe('the stages ClickHouse files under each part of a run (SPEC §13)', () => {
  const schema = readFileSync(join(__dirname, '..', '..', 'deploy', 'clickhouse', 'init', '01-ci-job-telemetry.sql'), 'utf8');

  it("are the walk's: each stage name under its RUNNER_PARTS number, any other stage `other`", () => {
    const mapping =
      /AS execution,\s*groupArrayIf\(\s*\(cityHash64\(SpanId\), cityHash64\(ParentSpanId\),\s*toUInt8\(transform\(toString\(SpanName\),\s*\[([^\]]*)\],\s*\[([^\]]*)\],\s*(\d+)\)\)/.exec(
        schema,
      );
    expect(mapping).not.toBeNull();
    const names = mapping![1].split(',').map((name) => name.trim().replace(/^'|'$/g, ''));
    const numbers = mapping![2].split(',').map(Number);
    const written = Object.fromEntries(names.map((name, i) => [name, RUNNER_PARTS[numbers[i] - 1]]));
    expect(written).toEqual(STAGE_PARTS);
    expect(RUNNER_PARTS[Number(mapping![3]) - 1]).toBe('other');
  });
});
