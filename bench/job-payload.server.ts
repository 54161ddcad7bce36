/**
 * Server side of job-payload.bench.ts (not run by hand): the real internal API, built exactly as
 * src/main.ts builds it, plus a bare Fastify route on the same instance as the baseline.
 */
import 'reflect-metadata';
import { hash } from 'node:crypto';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import type { FastifyRequest } from 'fastify';
import type { AddressInfo } from 'node:net';
import { createInternalApp } from '../src/app.factory';
import { loadConfig } from '../src/config/app-config';
import { loadSecrets } from '../src/config/secrets';
import { createLogger } from '../src/observability/logger';
import { SAMPLED_ACCESS_LOG } from '../src/observability/request-hooks';
import { GrantStore } from '../src/grants/grant';
import { GRANT_STORE } from '../src/grants/grants.constants';
import { INTERNAL_API_HEADER } from '../src/internal-api/internal-api-token';
import { credentialCacheKey, forwardedCredential } from '../src/runner-auth/runner-credential';
import { INTERNAL_API_VERIFIER } from '../src/internal-api/internal-api.constants';
import { InternalApiTokenVerifier } from '../src/internal-api/internal-api-token';
import { callerCheckHook } from '../src/internal-api/internal-api-caller';
import { FlagsService } from '../src/flags/flags.service';
import { PipelineSpansService } from '../src/pipeline-spans/pipeline-spans.service';
import { parseJobPayloadRequest } from '../src/job-payload/job-payload-request';
import { changesAnswer, decoratedAnswer, JobPayloadBody, prefersChanges, useJobPayloadParser } from '../src/job-payload/job-payload-body';
import { enabledTelemetry, flagContextOf, payloadChanges, pickupRecords, tracesUrl, withoutTrailingSlash } from '../src/job-payload/job-payload-decoration';
import { capabilityPath, mintCapability } from '../src/runner-auth/job-capability';
import { spanIdFor, traceContextOf, traceIdFor } from '../src/trace-context/trace-context';
import { testGrant } from '../test/helpers/grants';
import { HeadDecisions } from '../src/job-payload/head-decisions';
import { TracedWorkStore } from '../src/traced-work/traced-work';
import { PICKUP_TRACED_WORK_STORE } from '../src/traced-work/traced-work.constants';
import {
  BARE_ROUTE,
  BARE_SAMPLED_ROUTE,
  DIGESTS_ROUTE,
  ECHO_ROUTE,
  ECHO_STORE_ROUTE,
  FLOOR_ROUTE,
  FromServer,
  STORE_ROUTE,
  ToServer,
} from './lib/bench-server';

async function serve(): Promise<void> {
  const config = loadConfig(process.env);
  const secrets = loadSecrets(config);
  // As main.ts: the logger's default destination, stdout in batches; the bench points stdout at a file.
  const logger = createLogger(config.process.logLevel);
  const app = await createInternalApp(config, secrets, logger);

  // Same instance, so the same body parser, request-id and access-log hooks; none of Nest's routing,
  // guard, pipe or interceptor machinery, and a small answer instead of the decorated payload.
  const fastify = app.getHttpAdapter().getInstance();
  const bare = async (request: FastifyRequest<{ Body: { job?: { id?: unknown } } | undefined }>) => ({ ok: true, job_id: request.body?.job?.id ?? null });
  fastify.post(BARE_ROUTE, bare);
  // The auth endpoint's baselines are logged as it is: successes at most once per interval.
  fastify.post(BARE_SAMPLED_ROUTE, { config: SAMPLED_ACCESS_LOG }, bare);
  // The extra baseline: the same, answering with the payload re-serialized, in the decorator's answer shape.
  fastify.post<{ Body: { payload?: unknown } }>(ECHO_ROUTE, async (request) => ({
    payload: request.body?.payload ?? null,
    telemetry: { enabled: false, reason: 'flag_disabled' },
  }));

  const store = app.get<GrantStore>(GRANT_STORE);
  fastify.post(STORE_ROUTE, { config: SAMPLED_ACCESS_LOG }, async () => {
    const grant = await store.findGrant(1);
    return { ok: grant !== null };
  });
  // Echo plus a grant as the decorator writes it, with its traced job in the same step, for the request's job; the digests
  // and the trace id are fixed (making them is the decorator's own work).
  fastify.post<{ Body: { payload?: unknown; job?: { id?: number; project_id?: number; pipeline_id?: number; timeout?: number } } }>(
    ECHO_STORE_ROUTE,
    async (request) => {
      const job = request.body?.job ?? {};
      const jobId = Number(job.id);
      const grant = testGrant({
        jobId,
        projectId: Number(job.project_id),
        pipelineId: Number(job.pipeline_id),
        rootPipelineId: Number(job.pipeline_id),
        jobTokenDigest: String(jobId).padStart(64, '0'),
        expiresAt: Date.now() + (Number(job.timeout ?? 3600) + 3600) * 1000,
      });
      const { projectId, pipelineId, rootPipelineId, runnerId, traceId } = grant;
      await store.saveGrant(grant, { jobId, pipelineId, rootPipelineId, projectId, runnerId, runnerType: 'project_type', traceId, pickedUpAt: Date.now() });
      return { payload: request.body?.payload ?? null, telemetry: { enabled: false, reason: 'flag_disabled' } };
    },
  );

  // The decorator's floor: each step SPEC §4 and §10 ask of an enabled pickup, made by the same calls the decorator
  // makes, and nothing else: no decision metrics, self-tracing span or store timeout, no branch for another outcome.
  // Its successes are logged as the decorator's are (sampled): a line per pickup is no step SPEC §4 or §10 asks.
  const verifier = app.get<InternalApiTokenVerifier>(INTERNAL_API_VERIFIER);
  const flags = app.get(FlagsService);
  const pipelineSpans = app.get(PipelineSpansService);
  const traceIds = new Map<number, string>();
  const headDecisions = new HeadDecisions(app.get<TracedWorkStore>(PICKUP_TRACED_WORK_STORE), config.outbox.dedupSeconds * 1000);
  const gateway = withoutTrailingSlash(config.jobPayload.gatewayPublicUrl);
  await fastify.register(async (scope) => {
    useJobPayloadParser(scope);
    scope.post(
      FLOOR_ROUTE,
      { config: SAMPLED_ACCESS_LOG, onRequest: callerCheckHook((headers) => verifier.refusal(headers[INTERNAL_API_HEADER]), logger) },
      async (request, reply) => {
        const body = request.body as JobPayloadBody;
        const changesOnly = prefersChanges(request.headers.prefer);
        const { runner, job, payload } = parseJobPayloadRequest(body.json, !changesOnly).request!;
        const flagged = flags.isTelemetryEnabled(flagContextOf(runner, job));
        // Issue 35: the root pipeline's head decision, pinned in the store at its first pickup on this replica.
        const head =
          headDecisions.remembered(job.root_pipeline_id) ?? (await headDecisions.pin(job.root_pipeline_id, { samplingPercent: flags.samplingPercent() }));
        let traceId = traceIds.get(job.root_pipeline_id);
        if (traceId === undefined) traceIds.set(job.root_pipeline_id, (traceId = traceIdFor(secrets.traceKey, job.root_pipeline_id)));
        const context = traceContextOf(traceId, spanIdFor(secrets.traceKey, job.id), head.samplingPercent);
        if (!flagged || !context.sampled) throw new Error('floor: every bench pickup is enabled');
        const { grant, tracedJob, saveOptions } = pickupRecords(runner, job, context, secrets.tokenDigestKey, config.jobPayload.grantGraceSeconds);
        await store.saveGrant(grant, tracedJob, saveOptions);
        pipelineSpans.recordPickup(tracedJob, grant.expiresAt, context.spanParentId);
        const capabilityBase = `${gateway}${capabilityPath(job.id, mintCapability(secrets.capabilityKeys[0], job.id))}`;
        const endpoint = { url: tracesUrl(capabilityBase) };
        const decoration = { changes: payloadChanges(context, endpoint, capabilityBase), telemetry: enabledTelemetry(context, endpoint, grant.expiresAt) };
        void reply.header('content-type', 'application/json; charset=utf-8');
        if (changesOnly) {
          void reply.header('preference-applied', 'return=minimal');
          return changesAnswer(job.id, decoration);
        }
        return decoratedAnswer(body, payload!, decoration);
      },
    );
  });

  // The digests as the service makes them: crypto.hash of the caller's header, and the credential's cache key.
  fastify.post(DIGESTS_ROUTE, { config: SAMPLED_ACCESS_LOG }, async (request) => ({
    ok: hash('sha256', String(request.headers[INTERNAL_API_HEADER]), 'base64') !== credentialCacheKey(forwardedCredential(request.headers)),
  }));

  await app.listen(config.process.internalPort, config.process.host);
  const reply = (message: FromServer) => process.send?.(message);
  reply({ type: 'listening', port: (app.getHttpServer().address() as AddressInfo).port });

  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  // Garbage collection's pauses, so a loop stall can be told apart from the collector's.
  const gc = { maxMs: 0, totalMs: 0 };
  new PerformanceObserver((entries) => {
    for (const { duration } of entries.getEntries()) {
      gc.maxMs = Math.max(gc.maxMs, duration);
      gc.totalMs += duration;
    }
  }).observe({ entryTypes: ['gc'] });
  process.on('message', (message: ToServer) => {
    switch (message.type) {
      case 'loop': {
        reply({ type: 'loop', p99Ms: loop.percentile(99) / 1e6, maxMs: loop.max / 1e6, gcMaxMs: gc.maxMs, gcTotalMs: gc.totalMs });
        loop.reset();
        gc.maxMs = 0;
        gc.totalMs = 0;
        break;
      }
      case 'cpu': {
        const { user, system } = process.cpuUsage();
        reply({ type: 'cpu', micros: user + system });
        break;
      }
      case 'stop':
        app.close().finally(() => process.exit(0));
        break;
      default: {
        const unknown: never = message;
        throw new Error(`unknown message ${JSON.stringify(unknown)}`);
      }
    }
  });
  // The bench died: do not linger.
  process.once('disconnect', () => process.exit(0));
}

serve().catch((error: unknown) => {
  process.stderr.write(`bench server failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
