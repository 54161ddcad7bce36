/**
 * Bounded graceful shutdown (SPEC §8): on SIGTERM in-flight requests get this long to finish before
 * the process exits anyway. Orchestrators must wait at least this long (deploy/kubernetes,
 * docker-compose.yml) or they cut exports off mid-flight.
 */
export const SHUTDOWN_GRACE_MS = 10_000;
