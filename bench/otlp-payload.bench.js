// Run from the repository root:   node bench/otlp-payload.bench.js [rounds] [spans]
//
// Compares the two ways of enforcing SPEC §6 on an OTLP/HTTP protobuf trace export, on the same batch, in the
// same process, alternating rounds so a noisy machine hurts both alike:
//   wire        src/otlp-gateway (walks the envelope, copies untouched bytes as slices)
//   protobufjs  decode the whole request with a complete schema, edit objects, encode again
// and, for reference, the JSON path of src/otlp-gateway on the same batch in OTLP/JSON.
// Plain JavaScript so it needs no build: the TypeScript sources are transpiled on require (no type check).
'use strict';

const path = require('node:path');
const protobuf = require('protobufjs');

require('./lib/require-ts');

const { enforceExport } = require('../src/otlp-gateway/wire/otlp-payload.ts');

const root = protobuf.loadSync(path.join(__dirname, '../src/otlp-gateway/wire/proto/otlp.proto'));
const Request = root.lookupType('otlp.ExportTraceServiceRequest');

const ROUNDS = Number(process.argv[2] ?? 7);
const SPANS = Number(process.argv[3] ?? 512);
const ROUND_MS = 400;
const GRANT = { jobId: 123456789, projectId: 278964, pipelineId: 1500000001, runnerId: 42, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' };
const FOREIGN_TRACE = '0af7651916cd43dd8448eb211c80319c';
const FOREIGN_EVERY = 64; // 8 foreign spans in 512
const { IDENTITY_ATTRIBUTE_KEYS: IDENTITY_KEYS } = require('../src/otlp-gateway/wire/otlp-identity.ts');
const { ciJobSpanBatch, withBinaryIds } = require('./lib/otlp-batch.ts');

/**
 * Alternative (b): full decode, object edits, full encode. Mirrors the wire implementation's rules for this batch
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

function opsPerSecond(fn) {
  let ops = 0;
  const started = process.hrtime.bigint();
  const deadline = started + BigInt(ROUND_MS) * 1000000n;
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

const logical = ciJobSpanBatch({
  traceId: GRANT.traceId,
  spans: SPANS,
  attributesPerSpan: 10,
  foreignTraceId: FOREIGN_TRACE,
  isForeign: (i) => i % FOREIGN_EVERY === 7,
});
const protobufBody = Buffer.from(Request.encode(Request.fromObject(withBinaryIds(logical))).finish());
const jsonBody = Buffer.from(JSON.stringify(logical));
const budget = 1000;
// The gateway's default per-span limits (src/config/app-config.ts): every span of the batch is within them.
const LIMITS = { maxBytes: 4096, maxAttributes: 128, maxAttributeValueBytes: 2048 };

// Both must reach the same verdict and the same decoded data before their speed means anything.
const viaWire = enforceExport('traces', 'protobuf', protobufBody, GRANT, budget, LIMITS);
const viaProtobufjs = enforceWithProtobufjs(protobufBody, GRANT, budget);
const decoded = (body) => JSON.stringify(Request.toObject(Request.decode(body), { longs: String, bytes: String }));
if (
  viaWire.forwardedItems !== viaProtobufjs.forwardedItems ||
  viaWire.rejectedItems !== viaProtobufjs.rejectedItems ||
  decoded(viaWire.body) !== decoded(viaProtobufjs.body)
) {
  throw new Error('the two implementations disagree; fix before measuring');
}

const approaches = {
  wire: () => enforceExport('traces', 'protobuf', protobufBody, GRANT, budget, LIMITS),
  protobufjs: () => enforceWithProtobufjs(protobufBody, GRANT, budget),
  'json (reference)': () => enforceExport('traces', 'json', jsonBody, GRANT, budget, LIMITS),
};
for (const fn of Object.values(approaches)) opsPerSecond(fn); // warm-up

const samples = Object.fromEntries(Object.keys(approaches).map((name) => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, fn] of Object.entries(approaches)) samples[name].push(opsPerSecond(fn));
}

console.log(`node ${process.version}, ${SPANS} spans (${viaWire.rejectedItems} foreign), ~10 attributes each`);
console.log(`protobuf body ${protobufBody.length} B, JSON body ${jsonBody.length} B; median of ${ROUNDS} alternating rounds of ${ROUND_MS} ms`);
for (const [name, values] of Object.entries(samples)) {
  const ops = median(values);
  console.log(
    `${name.padEnd(18)} ${ops.toFixed(0).padStart(8)} ops/s  ${(ops * SPANS).toFixed(0).padStart(10)} spans/s  (min ${Math.min(...values).toFixed(0)}, max ${Math.max(...values).toFixed(0)})`,
  );
}
console.log(`wire / protobufjs = ${(median(samples.wire) / median(samples.protobufjs)).toFixed(2)}x`);
