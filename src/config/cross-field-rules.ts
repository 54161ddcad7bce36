import { CollectorConfig } from './sections/collector';
import { GatewayConfig } from './sections/gateway';
import { JobPayloadConfig } from './sections/job-payload';
import { ProcessConfig } from './sections/process';
import { StoreConfig, storeMode } from './sections/store';

/**
 * The rules that tie variables of several sections together, in one place. A section's own rules live with it
 * (the Redis topology beside the store's variables); these need the whole configuration.
 */

/** What a ROLE needs from other sections before it can start. */
export function roleProblems({
  process,
  gateway,
  collector,
  store,
}: {
  process: ProcessConfig;
  gateway: GatewayConfig;
  collector: CollectorConfig;
  store: StoreConfig;
}): string[] {
  const problems: string[] = [];
  if (process.role === 'gateway' && gateway.authUrl === undefined) {
    problems.push('AUTH_URL: required with ROLE=gateway (the control process auth endpoint)');
  }
  if (process.role === 'gateway' && collector.upstreamUrl === undefined) {
    problems.push('OTLP_UPSTREAM_URL: required with ROLE=gateway (an edge gateway keeps no exports on its own disk)');
  }
  if (process.role === 'gateway' && storeMode(store) === 'memory' && !gateway.perProcessQuotas) {
    problems.push(
      'REDIS_URL: required with ROLE=gateway (or REDIS_SENTINELS or REDIS_CLUSTER_NODES), or every replica keeps its own span quotas and rate limits (set GATEWAY_PER_PROCESS_QUOTAS=true if that is intended)',
    );
  }
  return problems;
}

/** GATEWAY_PUBLIC_URL, unset, follows GATEWAY_PORT: runners on this host reach the gateway there. */
export function defaultGatewayPublicUrl(process: ProcessConfig): string {
  return `http://localhost:${process.gatewayPort}`;
}

const LOOPBACK_HOSTS = new Set(['localhost', '[::1]', '::1']);
const WILDCARD_HOSTS = new Set(['0.0.0.0', '::', '[::]']);
const isLoopback = (host: string) => LOOPBACK_HOSTS.has(host) || /^127\.\d+\.\d+\.\d+$/.test(host);

/** The port a URL names, when it names this process: a loopback host, while HOST listens there too. */
function portOnThisHost(host: string, text: string): number | undefined {
  if (!WILDCARD_HOSTS.has(host) && !isLoopback(host)) return undefined;
  const url = new URL(text);
  if (!isLoopback(url.hostname)) return undefined;
  return Number(url.port || (url.protocol === 'https:' ? 443 : 80));
}

/**
 * Ports and addresses that cannot be right together, each of which would start and fail later, or
 * never visibly: a port the process would bind twice, runners handed a URL that is not the gateway,
 * a gateway forwarding to itself.
 */
export function addressProblems(
  { process, jobPayload, collector }: { process: ProcessConfig; jobPayload: JobPayloadConfig; collector: CollectorConfig },
  publicUrlSet: boolean,
): string[] {
  const problems: string[] = [];
  const { role, host, internalPort, gatewayPort } = process;
  const publicUrl = jobPayload.gatewayPublicUrl;
  const servesGateway = role !== 'control';
  const handsOutUrls = role !== 'gateway';
  if (servesGateway && gatewayPort !== 0 && gatewayPort === internalPort) {
    problems.push(`GATEWAY_PORT: ${gatewayPort} is INTERNAL_PORT too; ROLE=${role} listens on both, so give them different ports`);
  }
  if (handsOutUrls && gatewayPort === 0 && !publicUrlSet) {
    problems.push('GATEWAY_PUBLIC_URL: required with GATEWAY_PORT=0, since runners must be handed the port the gateway actually gets');
  }
  if (handsOutUrls && (publicUrlSet || !servesGateway) && internalPort !== 0 && portOnThisHost(host, publicUrl) === internalPort) {
    problems.push(
      `GATEWAY_PUBLIC_URL: ${publicUrl} is this process's internal API (INTERNAL_PORT=${internalPort}), not the OTLP gateway runners must be handed`,
    );
  }
  if (servesGateway && gatewayPort !== 0 && collector.upstreamUrl !== undefined && portOnThisHost(host, collector.upstreamUrl) === gatewayPort) {
    problems.push(
      `OTLP_UPSTREAM_URL: ${collector.upstreamUrl} is this process's own gateway (GATEWAY_PORT=${gatewayPort}), so exports would loop; point it at the OpenTelemetry Collector's OTLP/HTTP receiver`,
    );
  }
  return problems;
}
