// One embedded ClickHouse session (chdb) in its own process, driven by test/helpers/clickhouse.ts:
// one JSON request per stdin line ({ id, sql }), one JSON answer per stdout line ({ id, rows } or
// { id, error }). A process of its own because the engine is a native addon that a jest worker
// could otherwise be asked to load twice, and because its data directory goes away with it.
'use strict';
const { Session } = require('chdb');
const { createInterface } = require('node:readline');

const session = new Session();
const lines = createInterface({ input: process.stdin });

// One query at a time on the session, whether it came from stdin or over HTTP.
let last = Promise.resolve();
const serially = (task) => {
  const run = last.then(task);
  last = run.catch(() => undefined);
  return run;
};

// With CHDB_HTTP_PASSWORD set, the engine also serves ClickHouse's HTTP interface (http-interface.js), and
// says its port first: { http: port }.
if (process.env.CHDB_HTTP_PASSWORD !== undefined) {
  const { serveHttp } = require('./http-interface');
  serveHttp(session, { expectedPassword: process.env.CHDB_HTTP_PASSWORD, serially }).then((port) =>
    process.stdout.write(`${JSON.stringify({ http: port })}\n`),
  );
}

lines.on('line', (line) => serially(() => answerLine(line)));

function answerLine(line) {
  const { id, sql } = JSON.parse(line);
  let answer;
  try {
    // Ids and durations are UInt64: answered as JSON numbers, as a dashboard reads them. Set for each query,
    // since one over HTTP has the server's default.
    session.query('SET output_format_json_quote_64bit_integers = 0');
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
}

lines.on('close', () => {
  serially(() => session.close()).then(() => process.exit(0));
});
