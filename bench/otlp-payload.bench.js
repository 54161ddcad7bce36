// Run: npm run bench -- otlp-payload [--spans 100,1000] [--rounds 7] [--round-seconds 0.4]
//                                     [--only json] [--cpu-prof]
//   (or node bench/otlp-payload.bench.js, from the repository root)
//   (the older positional form `node bench/otlp-payload.bench.js <rounds> <spans>` still works)
//
// SPEC §6 enforcement alone (issue 12 target: ≥ 1,000,000 spans/s on one core, 100- and 1,000-span batches,
// both encodings), on the same batch in both encodings, in one process, alternating rounds so a noisy machine
// hurts every approach alike:
//   protobuf wire   src/otlp-gateway (walks the envelope, copies untouched bytes as slices)
//   protobufjs      decode the whole request with a complete schema, edit objects, encode again (comparison)
//   json            src/otlp-gateway on the same batch in OTLP/JSON
//   json ceiling    what any parse-and-reserialize enforcement pays at least on that body: TextDecoder +
//                   JSON.parse + JSON.stringify + Buffer.from, with no enforcement at all
// --ceiling-parts also measures each step of the ceiling alone. --only <approach> measures one approach (a
// prefix: `json`, `protobuf wire`); --cpu-prof profiles the measured rounds and prints the busiest functions per
// batch size (profiles kept in $TMPDIR/otlp-payload-bench/).
// Plain JavaScript so it needs no build: the TypeScript sources are transpiled on require (no type check).
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Session } = require('node:inspector');
const { parseArgs } = require('node:util');

require('./lib/require-ts');

const { enforceExport } = require('../src/otlp-gateway/export-policy/enforce-export.ts');
const { RESOURCE_OWNED_KEYS: IDENTITY_KEYS } = require('../src/otlp-gateway/export-policy/export-policy.ts');
const { exportRequestType } = require('../src/otlp/otlp-proto.ts');
const { ciJobSpanBatch, withBinaryIds } = require('./lib/otlp-batch.ts');
const { summarizeCpuProfile } = require('./lib/cpu-profile-summary.ts');

const Request = exportRequestType('traces');

const { values: args, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    spans: { type: 'string', default: '100,1000' },
    rounds: { type: 'string', default: '7' },
    'round-seconds': { type: 'string', default: '0.4' },
    only: { type: 'string' },
    'cpu-prof': { type: 'boolean', default: false },
    'ceiling-parts': { type: 'boolean', default: false },
  },
});
const ROUNDS = Number(positionals[0] ?? args.rounds);
const BATCH_SIZES = (positionals[1] ?? args.spans).split(',').map(Number);
const ROUND_MS = Number(args['round-seconds']) * 1000;
if (!(ROUNDS >= 1) || !(ROUND_MS > 0) || !BATCH_SIZES.every((spans) => Number.isInteger(spans) && spans > 0)) {
  throw new Error('usage: --spans <n,n,...> --rounds <n> --round-seconds <s>');
}

const GRANT = { jobId: 123456789, projectId: 278964, pipelineId: 1500000001, runnerId: 42, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' };
const FOREIGN_TRACE = '0af7651916cd43dd8448eb211c80319c';
const FOREIGN_EVERY = 64; // 8 foreign spans in 512
// The job's default span quota (SPEC §6): a 1,000-span batch fits, its foreign spans apart.
const BUDGET = 1000;
// The gateway's default per-span limits (src/config/sections/gateway.ts): every span of the batch is within them.
const LIMITS = { maxBytes: 4096, maxAttributes: 128, maxAttributeValueBytes: 2048 };

/**
 * The comparison: full decode, object edits, full encode. Mirrors the wire implementation's rules for this batch
 * (trace binding, quota, resource stamping); the batch has no span-level identity keys and no fields outside the
 * allow-list, so the item-level stamping and dropping the wire implementation also does are not needed here.
 */
function enforceWithProtobufjs(body, grant, spanBudget) {
  const traceId = Buffer.from(grant.traceId, 'hex');
  const identity = [
    { key: 'ci.job.id', value: { intValue: grant.jobId } },
    { key: 'ci.project.id', value: { intValue: grant.projectId } },
    { key: 'ci.pipeline.id', value: { intValue: grant.pipelineId } },
    { key: 'ci.runner.id', value: { intValue: grant.runnerId } },
    { key: 'cicd.pipeline.run.id', value: { stringValue: String(grant.pipelineId) } },
    { key: 'cicd.pipeline.task.run.id', value: { stringValue: String(grant.jobId) } },
    { key: 'cicd.worker.id', value: { stringValue: String(grant.runnerId) } },
    { key: 'ci.sampling.reason', value: { stringValue: 'head' } },
  ];
  const request = Request.decode(body);
  let kept = 0;
  let rejected = 0;
  const resourceSpans = [];
  for (const rs of request.resourceSpans) {
    const scopes = [];
    for (const ss of rs.scopeSpans) {
      const spans = ss.spans.filter((span) => {
        if (!traceId.equals(span.traceId) || kept >= spanBudget) {
          rejected++;
          return false;
        }
        kept++;
        return true;
      });
      if (spans.length > 0 || ss.spans.length === 0) {
        ss.spans = spans;
        scopes.push(ss);
      }
    }
    if (rs.scopeSpans.length > 0 && scopes.length === 0) continue;
    rs.scopeSpans = scopes;
    const resource = rs.resource ?? { attributes: [] };
    resource.attributes = resource.attributes.filter((kv) => !IDENTITY_KEYS.has(kv.key)).concat(identity);
    rs.resource = resource;
    resourceSpans.push(rs);
  }
  request.resourceSpans = resourceSpans;
  return { body: Buffer.from(Request.encode(request).finish()), forwardedItems: kept, rejectedItems: rejected };
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The floor under any JSON enforcement that parses the body and writes it again (the gateway's does both). */
function jsonRoundTrip(body) {
  return Buffer.from(JSON.stringify(JSON.parse(utf8.decode(body))), 'utf8');
}

function opsPerSecond(fn) {
  let ops = 0;
  const started = process.hrtime.bigint();
  const deadline = started + BigInt(Math.round(ROUND_MS * 1e6));
  let now = started;
  while (now < deadline) {
    fn();
    ops++;
    if ((ops & 3) === 0) now = process.hrtime.bigint();
  }
  now = process.hrtime.bigint();
  return ops / (Number(now - started) / 1e9);
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

function batchOf(spans) {
  const logical = ciJobSpanBatch({
    traceId: GRANT.traceId,
    spans,
    attributesPerSpan: 10,
    foreignTraceId: FOREIGN_TRACE,
    isForeign: (i) => i % FOREIGN_EVERY === 7,
  });
  const protobufBody = Buffer.from(Request.encode(Request.fromObject(withBinaryIds(logical))).finish());
  // As the SDK's JsonTraceSerializer sends it: JSON.stringify of the request object, UTF-8.
  const jsonBody = Buffer.from(JSON.stringify(logical));

  // Every approach must reach the same verdict and the same decoded data before its speed means anything.
  const viaWire = enforceExport('traces', 'protobuf', protobufBody, GRANT, BUDGET, LIMITS);
  const viaProtobufjs = enforceWithProtobufjs(protobufBody, GRANT, BUDGET);
  const viaJson = enforceExport('traces', 'json', jsonBody, GRANT, BUDGET, LIMITS);
  const decoded = (body) => JSON.stringify(Request.toObject(Request.decode(body), { longs: String, bytes: String }));
  const fromJson = (body) => decoded(Buffer.from(Request.encode(Request.fromObject(withBinaryIds(JSON.parse(body.toString())))).finish()));
  if (
    viaWire.forwardedItems !== viaProtobufjs.forwardedItems ||
    viaWire.rejectedItems !== viaProtobufjs.rejectedItems ||
    viaJson.forwardedItems !== viaWire.forwardedItems ||
    viaJson.rejectedItems !== viaWire.rejectedItems ||
    decoded(viaWire.body) !== decoded(viaProtobufjs.body) ||
    fromJson(viaJson.body) !== decoded(viaWire.body)
  ) {
    throw new Error(`the implementations disagree on the ${spans}-span batch; fix before measuring`);
  }

  const approaches = {
    'protobuf wire': () => enforceExport('traces', 'protobuf', protobufBody, GRANT, BUDGET, LIMITS),
    protobufjs: () => enforceWithProtobufjs(protobufBody, GRANT, BUDGET),
    json: () => enforceExport('traces', 'json', jsonBody, GRANT, BUDGET, LIMITS),
    'json ceiling': () => jsonRoundTrip(jsonBody),
  };
  const chosen = Object.entries(approaches).filter(([name]) => args.only === undefined || name.startsWith(args.only));
  if (chosen.length === 0) throw new Error(`--only ${args.only} matches none of ${Object.keys(approaches).join(', ')}`);
  if (args['ceiling-parts']) {
    const text = utf8.decode(jsonBody);
    const parsed = JSON.parse(text);
    const serialized = JSON.stringify(parsed);
    chosen.push(
      ['  TextDecoder', () => utf8.decode(jsonBody)],
      ['  JSON.parse', () => JSON.parse(text)],
      ['  JSON.stringify', () => JSON.stringify(parsed)],
      ['  Buffer.from', () => Buffer.from(serialized, 'utf8')],
    );
  }
  return { spans, protobufBody, jsonBody, rejected: viaWire.rejectedItems, approaches: Object.fromEntries(chosen) };
}

const profiler = args['cpu-prof'] ? new Session() : undefined;
const post = (method, params) => new Promise((resolve, reject) => profiler.post(method, params, (error, result) => (error ? reject(error) : resolve(result))));

async function measure(batch) {
  for (const fn of Object.values(batch.approaches)) opsPerSecond(fn); // warm-up
  if (profiler !== undefined) await post('Profiler.start');
  const samples = Object.fromEntries(Object.keys(batch.approaches).map((name) => [name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, fn] of Object.entries(batch.approaches)) samples[name].push(opsPerSecond(fn));
  }
  let profile;
  if (profiler !== undefined) {
    const directory = path.join(os.tmpdir(), 'otlp-payload-bench');
    fs.mkdirSync(directory, { recursive: true });
    profile = path.join(directory, `otlp-payload-${args.only ?? 'all'}-${batch.spans}.cpuprofile`.replace(/\s+/g, '-'));
    fs.writeFileSync(profile, JSON.stringify((await post('Profiler.stop')).profile));
  }
  return { samples, profile };
}

async function main() {
  if (profiler !== undefined) {
    profiler.connect();
    await post('Profiler.enable');
  }
  console.log(`otlp-payload bench on node ${process.version}: median of ${ROUNDS} alternating rounds of ${ROUND_MS} ms; one core (one thread)`);
  for (const spans of BATCH_SIZES) {
    const batch = batchOf(spans);
    const { samples, profile } = await measure(batch);
    console.log('');
    console.log(`${spans} spans (${batch.rejected} foreign), ~10 attributes each: protobuf ${batch.protobufBody.length} B, JSON ${batch.jsonBody.length} B`);
    for (const [name, values] of Object.entries(samples)) {
      const ops = median(values);
      console.log(
        `  ${name.padEnd(16)} ${ops.toFixed(0).padStart(8)} exports/s ${(ops * spans).toFixed(0).padStart(10)} spans/s ${(1e6 / ops).toFixed(1).padStart(9)} µs/export  (min ${Math.min(...values).toFixed(0)}, max ${Math.max(...values).toFixed(0)} exports/s)`,
      );
    }
    if (samples['protobuf wire'] !== undefined && samples.protobufjs !== undefined) {
      console.log(`  protobuf wire / protobufjs = ${(median(samples['protobuf wire']) / median(samples.protobufjs)).toFixed(2)}x`);
    }
    if (samples.json !== undefined && samples['json ceiling'] !== undefined) {
      console.log(
        `  json / json ceiling = ${(median(samples.json) / median(samples['json ceiling'])).toFixed(2)}x (1.00x: enforcement costs nothing beyond parse and stringify)`,
      );
    }
    if (profile !== undefined) {
      const summary = summarizeCpuProfile(profile, path.resolve(__dirname, '..'), 15);
      console.log(`  busiest functions (self time, ${summary.busyMs.toFixed(0)} ms busy; ${profile}):`);
      for (const entry of summary.top) console.log(`    ${(entry.share * 100).toFixed(1).padStart(5)}%  ${entry.frame}`);
    }
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
