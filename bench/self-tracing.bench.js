// Run: npm run bench -- self-tracing [rounds] [calls]   (or node bench/self-tracing.bench.js, from the repository root)
//
// What self-instrumentation (SPEC §8, src/observability/tracing.ts) costs one decision, in the same process,
// rounds alternating so a noisy machine hurts every mode alike:
//   none       the decision's own work without any span (the baseline: a job-payload-sized object built)
//   no-op      the same plus startDecisionSpan/end with no SDK registered (the default deployment)
//   recording  the same with an SDK registered, a BatchSpanProcessor and an exporter that drops the batch
//              (what OTEL_EXPORTER_OTLP_ENDPOINT costs in-process, without the network)
// Prints ns per decision and the extra cost of each mode over the baseline. The decorator and the gateway
// spend hundreds of µs of CPU per request (the job-payload and otlp-gateway benches), which is the scale to
// read the extra nanoseconds against.
'use strict';

require('./lib/require-ts');

const { trace } = require('@opentelemetry/api');
const { BasicTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { startDecisionSpan } = require('../src/observability/tracing.ts');

const ROUNDS = Number(process.argv[2] ?? 7);
const CALLS = Number(process.argv[3] ?? 200_000);

let sink = 0;
const work = (i) => {
  const decision = { reason: i % 7 === 0 ? 'flag_disabled' : 'enabled', jobId: i, projectId: 7, runnerId: 17 };
  sink += decision.reason.length;
  return decision;
};

const modes = {
  none: () => {
    for (let i = 0; i < CALLS; i++) work(i);
  },
  'no-op': () => {
    for (let i = 0; i < CALLS; i++) {
      const span = startDecisionSpan('ci_job_telemetry.job_payload');
      const decision = work(i);
      span.end(decision.reason, () => ({ 'ci.job.id': decision.jobId, 'ci.project.id': decision.projectId, 'ci.runner.id': decision.runnerId }));
    }
  },
};
modes.recording = modes['no-op'];

const dropping = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => undefined, forceFlush: async () => undefined };

/** One round of one mode, in a process of its own: a registered SDK cannot be taken back from a tracer already handed out. */
async function measure(mode) {
  let provider;
  if (mode === 'recording') {
    provider = new BasicTracerProvider({
      spanProcessors: [new BatchSpanProcessor(dropping, { maxQueueSize: 100_000, maxExportBatchSize: 4096, scheduledDelayMillis: 50 })],
    });
    trace.setGlobalTracerProvider(provider);
  }
  modes[mode](); // warm-up
  const started = process.hrtime.bigint();
  modes[mode]();
  const ns = Number(process.hrtime.bigint() - started) / CALLS;
  await provider?.shutdown();
  process.stdout.write(`${ns}\n`);
}

function main() {
  const { execFileSync } = require('node:child_process');
  const results = { none: [], 'no-op': [], recording: [] };
  for (let round = 0; round < ROUNDS; round++) {
    // Order rotated each round, so drift on a shared machine hits every mode alike.
    const order = Object.keys(results);
    for (let i = 0; i < round % order.length; i++) order.push(order.shift());
    for (const mode of order) {
      results[mode].push(Number(execFileSync(process.execPath, [__filename, String(ROUNDS), String(CALLS), mode], { encoding: 'utf8' })));
    }
  }
  const median = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)];
  const base = median(results.none);
  console.log(`self-tracing bench on node ${process.version}: ${CALLS} decisions per round, ${ROUNDS} rounds (one process each), median ns per decision`);
  for (const mode of Object.keys(results)) {
    const ns = median(results[mode]);
    console.log(`  ${mode.padEnd(10)} ${ns.toFixed(0).padStart(6)} ns   (+${(ns - base).toFixed(0)} ns over none)`);
  }
}

if (process.argv[4] !== undefined) {
  measure(process.argv[4]).then(() => (sink === 0 ? process.stderr.write('') : undefined));
} else {
  main();
}
