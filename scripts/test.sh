#!/usr/bin/env bash
# The test command (`npm test`): installs what the tests need, builds the service the e2e tests run,
# then runs jest with any arguments given (`npm test -- test/http`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
npm run -s build
exec npx jest "$@"
