#!/usr/bin/env bash
# Installs what the e2e tests need to run a real Unleash server on a real PostgreSQL
# (test/helpers/postgres.ts, test/helpers/unleash-server.ts):
#   - PostgreSQL's server binaries (initdb, postgres) from Debian, unless usable ones are already there;
#   - test/unleash's own node_modules (unleash-server, pinned in test/unleash/package-lock.json),
#     unless they are already installed from the current lock file.
# Idempotent: a second run changes nothing and takes well under a second.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
unleash_dir="$repo_root/test/unleash"
stamp="$unleash_dir/node_modules/.installed-from-lock.sha256"

say() { printf 'install-unleash-deps: %s\n' "$*"; }

# Prints the directory holding usable initdb and postgres binaries, or nothing.
# Debian keeps them off PATH, under /usr/lib/postgresql/<version>/bin; the newest version wins.
find_pg_bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -rn) "$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")"; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] \
      && "$dir/initdb" --version >/dev/null 2>&1 && "$dir/postgres" --version >/dev/null 2>&1; then
      echo "$dir"
      return 0
    fi
  done
  return 0
}

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

pg_bindir="$(find_pg_bindir)"
if [ -n "$pg_bindir" ]; then
  say "postgresql: found $("$pg_bindir/postgres" --version) in $pg_bindir"
else
  say "postgresql: not found, installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  # apt's chatter is kept back and shown only when a step fails.
  for step in "apt-get update" "apt-get install -y postgresql"; do
    if ! output="$(as_root $step 2>&1)"; then
      printf '%s\n' "$output" >&2
      say "postgresql: '$step' failed" >&2
      exit 1
    fi
  done
  pg_bindir="$(find_pg_bindir)"
  if [ -z "$pg_bindir" ]; then
    say "postgresql: installed, but no usable initdb/postgres found under /usr/lib/postgresql/*/bin" >&2
    exit 1
  fi
  say "postgresql: installed $("$pg_bindir/postgres" --version) in $pg_bindir"
fi

lock_sum="$(sha256sum "$unleash_dir/package-lock.json" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_sum" ] && [ -f "$unleash_dir/node_modules/unleash-server/package.json" ]; then
  say "unleash-server: node_modules up to date in test/unleash"
else
  say "unleash-server: npm ci in test/unleash"
  # --ignore-scripts: no dependency of Unleash needs an install script to run the server, and one of
  # them (Scarf) would phone home from it.
  (cd "$unleash_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
  say "unleash-server: installed $(node -p "require('$unleash_dir/node_modules/unleash-server/package.json').version")"
fi
