#!/usr/bin/env bash
# The one bench runner (bench/; what each measures and its latest figures: docs/performance.md).
#
# `npm run bench`: every benchmark below, one after the other (never beside each other or the tests: they measure
# CPU on a shared machine), each printing its ratios against a baseline measured in the same run. Writes
# bench/results/<UTC date>.md: the machine, then each bench's own output.
# `npm run bench -- --smoke`: each bench for a second or two, to check it still runs; judges no number and writes
# nothing (the test suite runs this, with BENCH_SKIP_BUILD=1: it has installed and built already).
# `npm run bench -- <name> [arguments]`: one bench, its arguments passed on (`npm run bench -- otlp-gateway --rounds 5`);
# `npm run bench -- <name> --smoke` runs it as the smoke run does. Nothing is written.
# Exits non-zero when any bench fails (a non-2xx answer, a lost span, a crash).
#
# The TypeScript benches are compiled by one tsconfig (bench/tsconfig.json) into build/bench, incrementally; the
# service a bench starts is this checkout's dist/, built first unless BENCH_SKIP_BUILD is set.
set -uo pipefail
cd "$(dirname "$0")/.."

# name | what it needs beyond itself | arguments of the full run | arguments of the smoke run
# "service": it starts the built service (dist/main.js).
benches=(
  "otlp-payload|||1 64"
  "self-tracing|||1 2000"
  "job-payload|||--rounds 1 --round-seconds 1 --warmup-seconds 0 --latency-seconds 1 --rate 100"
  "token-auth||--pin|--smoke"
  "otlp-gateway|service||--rounds 1 --round-seconds 1 --warmup-seconds 0"
  "store-durability|||--smoke"
  "pipeline-spans|service||--smoke"
  "lease-bound|service||--smoke"
  "outbox-holds|||--rounds 5"
  "ruby-client|||--rounds 1 --seconds 0.5 --warmup-seconds 0.2 --rate 100"
  "outcome-sampling|service||--smoke"
  "trace-reads|service||--smoke"
  "across|service||--smoke"
  "mcp|service||--smoke"
  "runtimes|service||--rounds 1 --round-seconds 1 --warmup-seconds 0"
)
# Run by name only: job-payload-revisions builds two revisions of its own (--before, --after); otlp-json-join is one
# measurement behind a design choice of the gateway (docs/gateway.md).
by_name_only=("job-payload-revisions|||" "otlp-json-join|||")

# The command that runs bench `$1` with the arguments after it: a .js bench from its source, a .ts one compiled.
command_of() {
  local name="$1"
  shift
  if [ -f "bench/$name.bench.js" ]; then
    echo "node bench/$name.bench.js${*:+ $*}"
  else
    echo "node build/bench/bench/$name.bench.js${*:+ $*}"
  fi
}

compile_benches() {
  node node_modules/typescript/bin/tsc -p bench/tsconfig.json
}

build_service() {
  [ -n "${BENCH_SKIP_BUILD:-}" ] || npm run -s build
}

describe_machine() {
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- CPU: $(nproc) × $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "- memory: $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1024 / 1024 }' /proc/meminfo)"
  echo "- node $(node --version), redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2), nginx $(nginx -v 2>&1 | cut -d/ -f2)"
  echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# One bench by name.
if [ $# -gt 0 ] && [ "$1" != "--smoke" ]; then
  name="$1"
  shift
  entry=""
  for candidate in "${benches[@]}" "${by_name_only[@]}"; do
    [ "${candidate%%|*}" = "$name" ] && entry="$candidate"
  done
  if [ -z "$entry" ]; then
    echo "no bench named '$name'; the benches: $(for e in "${benches[@]}" "${by_name_only[@]}"; do printf '%s ' "${e%%|*}"; done)" >&2
    exit 2
  fi
  IFS='|' read -r _ needs full quick <<<"$entry"
  arguments=("$@")
  [ "$*" = "--smoke" ] && read -r -a arguments <<<"$quick"
  [ $# -eq 0 ] && read -r -a arguments <<<"$full"
  if [ "$needs" = "service" ]; then build_service || exit 1; fi
  compile_benches || exit 1
  command="$(command_of "$name" "${arguments[@]}")"
  echo "== bench $name: $command"
  exec bash -c "$command"
fi

smoke=false
[ "${1:-}" = "--smoke" ] && smoke=true

if [ -z "${BENCH_SKIP_BUILD:-}" ]; then
  bash scripts/install-test-deps.sh >/dev/null || exit 1
fi
build_service || exit 1
compile_benches || exit 1

failed=()
report=""
for entry in "${benches[@]}"; do
  IFS='|' read -r name _ full quick <<<"$entry"
  arguments="$full"
  $smoke && arguments="$quick"
  # shellcheck disable=SC2086 # the table's arguments are words
  command="$(command_of "$name" $arguments)"
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
