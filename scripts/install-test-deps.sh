#!/usr/bin/env bash
# Installs the real servers the tests start as processes, when they are missing: redis-server (which
# also runs the sentinels: `redis-server <conf> --sentinel`), redis-cli (`--cluster create`), openssl
# (the Redis TLS tests' certificates), nginx and envsubst (gettext-base), from Debian's packages.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
# The nginx example is filled with envsubst, exactly as docs/nginx.md tells operators to.
command -v envsubst >/dev/null 2>&1 || missing+=(gettext-base)

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-test-deps: installing ${missing[*]} from Debian's packages"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -f scripts/install-unleash-deps.sh ]; then
  bash scripts/install-unleash-deps.sh
fi

if [ -f scripts/install-stack-test-deps.sh ]; then
  bash scripts/install-stack-test-deps.sh
fi
