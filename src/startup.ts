import { resolve } from 'node:path';
import { localCollectorDirectory } from './collector/collector-files';
import { AppConfig } from './config/app-config';
import { describeStore } from './store/redis-connection';
import type { CheckStatus } from './observability/readiness-checks';

/** What `--help` prints: the process takes no arguments, its configuration is the environment. */
export const USAGE = `ci-job-telemetry: the control plane that turns GitLab CI jobs into OpenTelemetry traces.

Usage: node dist/main.js    (npm start builds it first)

It serves, by ROLE (all, the default; control; gateway):
  INTERNAL_PORT  8080  the internal API GitLab calls (job-payload decorator, runner token auth, grant
                       revocation, GitLab webhooks), /-/liveness, /-/readiness and /metrics
  GATEWAY_PORT   4318  the OTLP/HTTP gateway runners export to (ROLE=all or gateway)

Configuration comes from environment variables only, no arguments or files: README.md, section
"Configuration", lists every variable with its default. With none set it runs on its embedded defaults
(flags from config/flags.json, an in-memory store, secrets generated under .secrets/, exports kept under
.data/otlp/ by the embedded collector). A bad value stops the start with one line naming the variable, and
exit code 78.
`;

export type CommandLine = { readonly kind: 'run' } | { readonly kind: 'help' } | { readonly kind: 'unknown'; readonly argument: string };

export function readCommandLine(args: readonly string[]): CommandLine {
  if (args.some((argument) => argument === '--help' || argument === '-h' || argument === 'help')) return { kind: 'help' };
  return args.length === 0 ? { kind: 'run' } : { kind: 'unknown', argument: args[0] };
}

/**
 * Why a port could not be listened on, as one line naming the variable to change, or undefined for a
 * failure that is not the configuration's (a bug: its stack is worth seeing).
 */
export function listenProblem(error: unknown, variable: 'INTERNAL_PORT' | 'GATEWAY_PORT', host: string, port: number): string | undefined {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  switch (code) {
    case 'EADDRINUSE':
      return `${variable}: ${address} is already in use; stop what listens there or set ${variable} to a free port`;
    case 'EACCES':
      return `${variable}: ${address} needs privileges this process does not have; set ${variable} to a port above 1023`;
    case 'EADDRNOTAVAIL':
      return `HOST: ${host} is not an address of this machine; set HOST to one of its addresses, or 0.0.0.0 for all of them`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_NONAME':
      return `HOST: ${host} cannot be resolved (${code}); set HOST to an address of this machine, or 0.0.0.0 for all of them`;
    default:
      return undefined;
  }
}

export interface StartedProcess {
  readonly internalUrl: string;
  readonly gatewayUrl?: string;
  readonly readiness: Readonly<Record<string, CheckStatus>>;
}

/** A URL as it may be logged: without user and password. */
function withoutCredentials(text: string): string {
  const url = new URL(text);
  url.username = '';
  url.password = '';
  return url.href.replace(/\/$/, '');
}

/**
 * The one line that says what this process is once it listens: what it serves, where its state and flags
 * come from, where exports go and what runners are handed. Only what this role has.
 */
/**
 * What the configuration allows but a user would not mean, said once at start as warnings (not refused: each has a
 * setup where it is right). Hosted runners with COLLECTOR_PUBLIC_URL left unset are told to export to
 * `http://localhost:4318`, their own host, which is the gateway's port in the shipped compose file: every export of
 * theirs would be refused there, unless a collector listens on each runner's host.
 */
export function startupWarnings({ process, jobPayload }: AppConfig, env: NodeJS.ProcessEnv): string[] {
  const warnings: string[] = [];
  const hosted = jobPayload.hostedRunnerTypes.length > 0 || jobPayload.hostedRunnerIds.length > 0;
  if (process.role !== 'gateway' && hosted && (env.COLLECTOR_PUBLIC_URL ?? '') === '') {
    warnings.push(
      `hosted runners (HOSTED_RUNNER_TYPES/HOSTED_RUNNER_IDS) are told to export to ${jobPayload.collectorPublicUrl}/v1/traces, ` +
        'their own host, because COLLECTOR_PUBLIC_URL is unset; set it to the collector as they reach it ' +
        '(its hosted-runner receiver), unless a collector listens on each of their hosts',
    );
  }
  return warnings;
}

export function startupSummary(config: AppConfig, started: StartedProcess): Record<string, unknown> {
  const checks = started.readiness;
  const reachability = checks.store === undefined ? '' : checks.store === 'ok' ? ' (reachable)' : ' (unreachable)';
  const summary: Record<string, unknown> = { role: config.process.role, internalApi: started.internalUrl };
  if (started.gatewayUrl !== undefined) summary.otlpGateway = started.gatewayUrl;
  summary.store = `${describeStore(config.store)}${reachability}`;
  if (config.process.role !== 'gateway') {
    const { unleashUrl, file } = config.flags;
    const flags = unleashUrl === undefined ? `file ${resolve(file)}` : `Unleash ${withoutCredentials(unleashUrl)}`;
    summary.flags = checks.flags === 'ok' ? flags : `${flags} (no definitions yet: telemetry is off)`;
    summary.gatewayPublicUrl = config.jobPayload.gatewayPublicUrl;
    summary.gitlabWebhooks = config.webhooks.secretFile === undefined ? 'off (GITLAB_WEBHOOK_SECRET_FILE unset)' : 'on';
  }
  const upstream = config.collector.upstreamUrl;
  summary.upstream = upstream === undefined ? `embedded collector, ${localCollectorDirectory(config.process.dataDir)}` : withoutCredentials(upstream);
  return summary;
}
