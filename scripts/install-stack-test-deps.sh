#!/usr/bin/env bash
# Installs what the stack tests need (test/e2e/stack-*.e2e-spec.ts, test/e2e/demo.e2e-spec.ts):
#   - docker-compose from Debian's packages, for `docker-compose config` (it validates the compose file
#     with no Docker engine);
#   - test/chdb's own node_modules (chdb: ClickHouse embedded, its engine inside the npm tarball) and
#     test/kubernetes's (the Kubernetes API schemas), each pinned by its own lock file, unless already
#     installed from the current lock. They stay out of the root package so `npm ci` stays light.
# Idempotent: a second run changes nothing and takes well under a second.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf 'install-stack-test-deps: %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo -n "$@"
  else
    say "need root to run: $*" >&2
    return 1
  fi
}

if command -v docker-compose >/dev/null 2>&1; then
  say "docker-compose: found $(docker-compose version --short 2>/dev/null || echo '(version unknown)')"
else
  say "docker-compose: not found, installing Debian's docker-compose"
  export DEBIAN_FRONTEND=noninteractive
  for step in "apt-get update" "apt-get install -y --no-install-recommends docker-compose"; do
    if ! output="$(as_root $step 2>&1)"; then
      printf '%s\n' "$output" >&2
      say "docker-compose: '$step' failed" >&2
      exit 1
    fi
  done
fi

# npm ci in test/<project> when its lock file changed since the last install.
install_project() {
  local project="$1" marker="$2"
  local dir="$repo_root/test/$project"
  local stamp="$dir/node_modules/.installed-from-lock.sha256"
  local lock_sum
  lock_sum="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_sum" ] && [ -f "$dir/node_modules/$marker/package.json" ]; then
    say "$project: node_modules up to date in test/$project"
    return 0
  fi
  say "$project: installing test/$project from its lock file"
  # `npm install` rather than `npm ci`: chdb names an optional engine package per platform and the
  # lock can only hold the ones the registry serves (linux-x64 here), which `npm ci` refuses as out
  # of sync; `npm install` takes the locked versions and leaves the lock as it is.
  # --ignore-scripts: chdb's engine ships prebuilt inside its platform package; nothing needs a script.
  (cd "$dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
  say "$project: installed $marker $(node -p "require('$dir/node_modules/$marker/package.json').version")"
}

install_project chdb chdb
install_project kubernetes kubernetes-models
