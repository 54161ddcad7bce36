#!/usr/bin/env bash
# Creates the secret files docker-compose.yml mounts into the service, where they are missing:
# base64 of 32 random bytes, mode 0600, under .secrets/ (the same files `npm start` generates, so
# `npm run -s token` signs internal-API requests the compose service accepts; gitlab_webhook_secret is
# the secret token to give GitLab's webhook). Never overwrites one.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077
mkdir -p .secrets
for name in internal_api_secret trace_key capability_key gitlab_webhook_secret; do
  if [ ! -s ".secrets/$name" ]; then
    node -e 'process.stdout.write(require("node:crypto").randomBytes(32).toString("base64") + "\n")' >".secrets/$name"
    echo "stack-secrets: created .secrets/$name"
  fi
done
