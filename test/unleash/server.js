'use strict';
/**
 * A real Unleash server (unleash-server 7.5.1) for the e2e tests, started as a plain process by
 * test/helpers/unleash-server.ts. Everything comes from Unleash's own environment variables:
 *
 *   DATABASE_URL           postgres://user@127.0.0.1:port/db (required; waited for, see waitForDatabase)
 *   HTTP_PORT              port to listen on (required); HTTP_HOST defaults to 127.0.0.1 here
 *   INIT_ADMIN_API_TOKENS  e.g. "*:*.<secret>"             (admin API)
 *   INIT_BACKEND_API_TOKENS e.g. "*:development.<secret>"  (client API; INIT_CLIENT_API_TOKENS is the old name)
 *   LOG_LEVEL              Unleash's log level, default "warn" here
 *
 * There is no internet in CI: the version check and usage telemetry are switched off, and the
 * dependencies' install scripts (Scarf's analytics among them) are never run (npm ci --ignore-scripts).
 */

if (!process.env.DATABASE_URL || !process.env.HTTP_PORT) {
  console.error('test/unleash/server.js: DATABASE_URL and HTTP_PORT are required');
  process.exit(2);
}

const defaults = {
  HTTP_HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  CHECK_VERSION: 'false',
  SEND_TELEMETRY: 'false',
  DATABASE_SSL: 'false',
  GRACEFUL_SHUTDOWN_TIMEOUT: '500',
  // Signals are handled below, so a stop is quiet and its exit code means something.
  GRACEFUL_SHUTDOWN_ENABLE: 'false',
};
for (const [name, value] of Object.entries(defaults)) {
  if (process.env[name] === undefined) process.env[name] = value;
}

// pg warns about its own internal query queueing on every start; nothing here can act on it.
process.noDeprecation = true;

const startedAt = Date.now();
let unleash;
let stopping = false;

async function stop(signal) {
  if (stopping) return;
  stopping = true;
  try {
    if (unleash) await unleash.stop();
    process.exit(0);
  } catch (error) {
    console.error(`unleash: stop on ${signal} failed:`, error);
    process.exit(1);
  }
}
process.on('SIGTERM', () => void stop('SIGTERM'));
process.on('SIGINT', () => void stop('SIGINT'));

/**
 * Loading unleash-server takes seconds of CPU, so it is loaded while the database is still coming up:
 * the test helper starts this process and PostgreSQL side by side. This waits until DATABASE_URL
 * accepts a connection (its database created), at most DATABASE_WAIT_MS.
 */
async function waitForDatabase() {
  const { Client } = require('pg'); // unleash-server's own driver
  const deadline = Date.now() + Number(process.env.DATABASE_WAIT_MS ?? 30000);
  for (;;) {
    const client = new Client({ connectionString: process.env.DATABASE_URL, connectionTimeoutMillis: 2000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.end();
      return;
    } catch (error) {
      await client.end().catch(() => undefined);
      if (Date.now() > deadline) throw new Error(`database ${process.env.DATABASE_URL} not reachable: ${error.message}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

// unleash-server is an ES module; a dynamic import keeps this file plain CommonJS.
Promise.all([import('unleash-server'), waitForDatabase()])
  .then(([{ start }]) =>
    start({
      versionCheck: { enable: false },
      server: { enableRequestLogger: false },
      // Open-source auth: the UI login is irrelevant here, API tokens are what the tests use.
      authentication: { enableApiToken: true },
    }),
  )
  .then((started) => {
    unleash = started;
    // One line the parent can wait for (it also polls /health).
    console.log(`unleash ready on http://${process.env.HTTP_HOST}:${process.env.HTTP_PORT} in ${Date.now() - startedAt} ms`);
  })
  .catch((error) => {
    console.error('unleash failed to start:', error);
    process.exit(1);
  });
