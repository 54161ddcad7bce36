#!/usr/bin/env bash
# The test command (`npm test`): installs what the tests need, builds the service the e2e tests run,
# then runs jest with any arguments given (`npm test -- test/http`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
npm run -s build
# The OpenTelemetry SDK exporters load node:http with a dynamic import(), which jest's module VM
# only allows with this flag. Spawned services get their own environment and do not inherit it.
# npm puts node_modules/.bin first on PATH: the node it names is the pinned LTS (package.json), whatever node runs npm.
echo "test: jest and the services it starts run on node $(node --version)"
export NODE_OPTIONS="--experimental-vm-modules${NODE_OPTIONS:+ $NODE_OPTIONS}"
exec npx jest "$@"
