#!/usr/bin/env bash
# Installs the real servers the tests start as processes, when they are missing: redis-server (which
# also runs the sentinels: `redis-server <conf> --sentinel`), redis-cli (`--cluster create`), openssl
# (the Redis TLS tests' certificates), nginx and envsubst (gettext-base), and Ruby with ruby-jwt and
# minitest (clients/ruby, tested against the service), from Debian's packages.
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
# clients/ruby: Debian's Ruby and minitest; ruby-jwt only for the test that has a standard JWT library verify the header.
command -v ruby >/dev/null 2>&1 || missing+=(ruby)
{ command -v ruby >/dev/null 2>&1 && ruby -e 'require "jwt"' >/dev/null 2>&1; } || missing+=(ruby-jwt)
{ command -v ruby >/dev/null 2>&1 && ruby -e 'require "minitest"' >/dev/null 2>&1; } || missing+=(ruby-minitest)

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
