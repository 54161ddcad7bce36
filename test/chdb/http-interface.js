// ClickHouse's HTTP interface in front of one embedded engine (chdb), so that a client under test
// (@clickhouse/client, the service's ClickHouse backend) talks real HTTP to real ClickHouse SQL: the same
// requests, parameters, compression, errors and summary headers as a ClickHouse server's port 8123.
// What it does not do is listed in docs/testing.md ("ClickHouse over HTTP on the embedded engine").
//
// Query parameters are not bound here: each `param_<name>` is handed to the engine with
// `SET param_<name> = '…'`, the way clickhouse-client sets them, so the engine's own code parses the
// escaped text the client sent, exactly as a server parses its URL parameters.
'use strict';
const { createServer } = require('node:http');
const { randomUUID } = require('node:crypto');
const { gunzipSync, gzipSync } = require('node:zlib');

/** URL parameters the HTTP interface reads itself; every other one is a setting. */
const NOT_SETTINGS = new Set([
  'query',
  'database',
  'default_format',
  'user',
  'password',
  'quota_key',
  'query_id',
  'session_id',
  'session_timeout',
  'session_check',
  'compress',
  'decompress',
  'buffer_size',
  'wait_end_of_query',
  'role',
  'enable_http_compression',
  'http_zlib_compression_level',
]);

/** A server's defaults where the engine's session (test/chdb/engine.js) sets its own for the tests' stdin queries. */
const SERVER_DEFAULTS = [['output_format_json_quote_64bit_integers', '1']];

/** HTTP statuses a ClickHouse server gives some exception codes; the rest are 500. */
const STATUS_OF_CODE = new Map([
  [62, 400], // SYNTAX_ERROR
  [456, 400], // UNKNOWN_QUERY_PARAMETER
  [457, 400], // BAD_QUERY_PARAMETER
  [60, 404], // UNKNOWN_TABLE
  [81, 404], // UNKNOWN_DATABASE
  [516, 403], // AUTHENTICATION_FAILED
]);

class ClickHouseException extends Error {
  constructor(code, name, message) {
    super(`Code: ${code}. DB::Exception: ${message}. (${name}) (version chdb)`);
    this.code = code;
  }
}

/** A string as a single-quoted SQL literal. */
const literal = (text) => `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\0/g, '\\0')}'`;
const identifier = (name) => `\`${name.replace(/\\/g, '\\\\').replace(/`/g, '\\`')}\``;

function password(request, url) {
  const basic = /^Basic (.+)$/i.exec(request.headers.authorization ?? '');
  if (basic) {
    const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
    return decoded.slice(decoded.indexOf(':') + 1);
  }
  return request.headers['x-clickhouse-key'] ?? url.searchParams.get('password') ?? '';
}

async function body(request) {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  const raw = Buffer.concat(chunks);
  return request.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
}

/** The engine's counters of rows and bytes read from tables, since it started. */
async function selected(session) {
  const result = await session.queryAsync(
    "SELECT toString(sumIf(value, event = 'SelectedRows')) AS rows, toString(sumIf(value, event = 'SelectedBytes')) AS bytes, count() AS own FROM system.events",
    { format: 'JSONEachRow' },
  );
  const { rows, bytes, own } = JSON.parse(result.text());
  return { rows: Number(rows), bytes: Number(bytes), own: Number(own) };
}

/**
 * Serves ClickHouse's HTTP interface for `session` on 127.0.0.1, with one user's `expectedPassword`.
 * `serially(task)` runs a task after every task given before it (the engine's session is one connection).
 * Resolves the port once listening.
 */
function serveHttp(session, { expectedPassword, serially }) {
  let currentDatabase;
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://clickhouse');
    const queryId = url.searchParams.get('query_id') || randomUUID();
    const answer = (status, headers, payload) => {
      const gzip = url.searchParams.get('enable_http_compression') === '1' && /\bgzip\b/.test(request.headers['accept-encoding'] ?? '');
      // At the level a ClickHouse server compresses at (http_zlib_compression_level, 3 unless asked), not zlib's 6.
      const level = Math.min(9, Math.max(1, Number(url.searchParams.get('http_zlib_compression_level') ?? 3) || 3));
      const bytes = gzip ? gzipSync(payload, { level }) : payload;
      response.writeHead(status, {
        'X-ClickHouse-Query-Id': queryId,
        'X-ClickHouse-Timezone': 'UTC',
        'Keep-Alive': 'timeout=10',
        'Content-Type': 'text/plain; charset=UTF-8',
        ...(gzip ? { 'Content-Encoding': 'gzip' } : {}),
        ...headers,
      });
      response.end(bytes);
    };
    const fail = (error) => {
      const message = (error instanceof Error ? error.message : String(error)).replace(/^Query failed: /, '');
      const code = error.code !== undefined && typeof error.code === 'number' ? error.code : Number(/Code: (\d+)/.exec(message)?.[1] ?? 1001);
      answer(STATUS_OF_CODE.get(code) ?? 500, { 'X-ClickHouse-Exception-Code': String(code) }, Buffer.from(`${message}\n`));
    };

    if (url.pathname === '/ping') return answer(200, {}, Buffer.from('Ok.\n'));
    if (url.pathname !== '/') return fail(new ClickHouseException(1001, 'STD_EXCEPTION', `There is no handle ${url.pathname}`));
    if (password(request, url) !== expectedPassword)
      return fail(
        new ClickHouseException(516, 'AUTHENTICATION_FAILED', 'default: Authentication failed: password is incorrect, or there is no user with such name'),
      );
    if (/^multipart\//i.test(request.headers['content-type'] ?? ''))
      return fail(new ClickHouseException(48, 'NOT_IMPLEMENTED', 'multipart query parameters are not served by this test interface'));

    body(request)
      .then((posted) => {
        const sql = [url.searchParams.get('query') ?? '', posted.toString('utf8')].filter((part) => part.length > 0).join('\n');
        const params = [...url.searchParams].filter(([name]) => name.startsWith('param_'));
        const settings = [...url.searchParams].filter(([name]) => !name.startsWith('param_') && !NOT_SETTINGS.has(name));
        return serially(async () => {
          // The session keeps parameters set by earlier requests: a placeholder this request does not set is an
          // error here, as on a server, rather than an older request's value.
          const given = new Set(params.map(([name]) => name.slice('param_'.length)));
          for (const [, name] of sql.matchAll(/\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*:/g))
            if (!given.has(name)) throw new ClickHouseException(456, 'UNKNOWN_QUERY_PARAMETER', `Substitution \`${name}\` is not set`);
          const database = url.searchParams.get('database');
          if (database && database !== currentDatabase) {
            await session.queryAsync(`USE ${identifier(database)}`);
            currentDatabase = database;
          }
          const assignments = [...params, ...SERVER_DEFAULTS, ...settings];
          await session.queryAsync(`SET ${assignments.map(([name, value]) => `${identifier(name)} = ${literal(value)}`).join(', ')}`);
          try {
            // The summary's rows and bytes read are the engine's SelectedRows and SelectedBytes over the query, as a
            // server counts them. Reading the counters reads system.events: the rows of the first reading are
            // counted after it, and taken off.
            const before = await selected(session);
            const result = await session.queryAsync(sql, { format: url.searchParams.get('default_format') ?? 'TabSeparated' });
            const after = await selected(session);
            return { result, read: { rows: Math.max(0, after.rows - before.rows - before.own), bytes: Math.max(0, after.bytes - before.bytes) } };
          } finally {
            // A setting holds for its request only, as on a server.
            const reset = [...SERVER_DEFAULTS, ...settings].map(([name]) => `${identifier(name)} = DEFAULT`);
            await session.queryAsync(`SET ${reset.join(', ')}`);
          }
        });
      })
      .then(({ result, read }) => {
        const summary = {
          read_rows: String(read.rows),
          read_bytes: String(read.bytes),
          written_rows: '0',
          written_bytes: '0',
          total_rows_to_read: String(read.rows),
          result_rows: String(result.rowsRead),
          result_bytes: String(result.bytesRead),
          elapsed_ns: String(Math.round(result.elapsed * 1e9)),
        };
        answer(200, { 'X-ClickHouse-Summary': JSON.stringify(summary) }, Buffer.from(result.bytes()));
      })
      .catch(fail);
  });
  // As a ClickHouse server's keep_alive_timeout, which the client compares with its idle socket TTL.
  server.keepAliveTimeout = 10_000;
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}

module.exports = { serveHttp };
