// One embedded ClickHouse session (chdb) in its own process, driven by test/helpers/clickhouse.ts:
// one JSON request per stdin line ({ id, sql }), one JSON answer per stdout line ({ id, rows } or
// { id, error }). A process of its own because the engine is a native addon that a jest worker
// could otherwise be asked to load twice, and because its data directory goes away with it.
'use strict';
const { Session } = require('chdb');
const { createInterface } = require('node:readline');

const session = new Session();
// Ids and durations are UInt64: answered as JSON numbers, as a dashboard reads them.
session.query('SET output_format_json_quote_64bit_integers = 0');
const lines = createInterface({ input: process.stdin });

lines.on('line', (line) => {
  const { id, sql } = JSON.parse(line);
  let answer;
  try {
    const text = session.query(sql, 'JSONEachRow');
    const rows = text
      .split('\n')
      .filter((row) => row.length > 0)
      .map((row) => JSON.parse(row));
    answer = { id, rows };
  } catch (error) {
    answer = { id, error: error instanceof Error ? error.message : String(error) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
});

lines.on('close', () => {
  session.close();
});
