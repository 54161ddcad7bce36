#!/usr/bin/env bash
# `npm run bench`: every benchmark in bench/, one after the other (never beside each other or the tests:
# they measure CPU on a shared machine), each printing its ratios against a baseline measured in the same
# run. Writes bench/results/<UTC date>.md: the machine, then each bench's own output.
# `npm run bench -- --smoke`: each bench for a second or two, to check it still runs; judges no number
# and writes nothing (the test suite runs this, with BENCH_SKIP_BUILD=1: it has installed and built already).
# Exits non-zero when any bench fails (a non-2xx answer, a lost span, a crash).
set -uo pipefail
cd "$(dirname "$0")/.."

smoke=false
[ "${1:-}" = "--smoke" ] && smoke=true

if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
  bash scripts/install-test-deps.sh >/dev/null || exit 1
  npm run -s build || exit 1
fi

# name | full run | smoke run
benches=(
  "otlp-payload|node bench/otlp-payload.bench.js|node bench/otlp-payload.bench.js 1 64"
  "self-tracing|node bench/self-tracing.bench.js|node bench/self-tracing.bench.js 1 2000"
  "job-payload|npm run -s bench:job-payload|npm run -s bench:job-payload -- --rounds 1 --round-seconds 1 --warmup-seconds 0 --latency-seconds 1 --rate 100"
  "token-auth|npm run -s bench:token-auth -- --pin|npm run -s bench:token-auth -- --smoke"
  "otlp-gateway|npm run -s bench:otlp-gateway|npx tsc -p bench/otlp-gateway.tsconfig.json && node node_modules/.cache/otlp-gateway-bench/bench/otlp-gateway.bench.js --rounds 1 --round-seconds 1 --warmup-seconds 0"
  "store-durability|npm run -s bench:store-durability|npm run -s bench:store-durability -- --smoke"
  "pipeline-spans|npm run -s bench:pipeline-spans|npm run -s bench:pipeline-spans -- --smoke"
  "lease-bound|npm run -s bench:lease-bound|npm run -s bench:lease-bound -- --smoke"
  "outbox-holds|npm run -s bench:outbox-holds|npm run -s bench:outbox-holds -- --rounds 5"
  "ruby-client|npm run -s bench:ruby-client|npm run -s bench:ruby-client -- --rounds 1 --seconds 0.5 --warmup-seconds 0.2 --rate 100"
  "outcome-sampling|npm run -s bench:outcome-sampling|npx tsc -p bench/outcome-sampling.tsconfig.json && node node_modules/.cache/outcome-sampling-bench/bench/outcome-sampling.bench.js --smoke"
  "trace-reads|npm run -s bench:trace-reads|npm run -s bench:trace-reads -- --smoke"
)

describe_machine() {
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- CPU: $(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "- memory: $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1024 / 1024 }' /proc/meminfo)"
  echo "- node $(node --version), redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2), nginx $(nginx -v 2>&1 | cut -d/ -f2)"
  echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

failed=()
report=""
for entry in "${benches[@]}"; do
  IFS='|' read -r name full quick <<<"$entry"
  command="$full"
  $smoke && command="$quick"
  echo "== bench $name: $command"
  output="$(bash -c "$command" 2>&1)"
  status=$?
  printf '%s\n' "$output"
  [ $status -eq 0 ] || failed+=("$name (exit $status)")
  report+=$'\n'"## $name"$'\n\n'"\`$command\`"$'\n\n```\n'"$output"$'\n```\n'
done

if ! $smoke; then
  mkdir -p bench/results
  file="bench/results/$(date -u +%Y-%m-%d).md"
  { echo "# Benchmarks, $(date -u +%Y-%m-%d)"; echo; describe_machine; printf '%s' "$report"; } >"$file"
  echo "written: $file"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "benches failed: ${failed[*]}"
  exit 1
fi
echo "all ${#benches[@]} benches ran"
