import 'reflect-metadata';
import { ClassConstructor, plainToInstance } from 'class-transformer';
import { getMetadataStorage, validateSync, ValidationError } from 'class-validator';
import { addressProblems, defaultGatewayPublicUrl, roleProblems } from './cross-field-rules';
import { CollectorConfig } from './sections/collector';
import { FlagsConfig } from './sections/flags';
import { GatewayConfig } from './sections/gateway';
import { InternalApiConfig } from './sections/internal-api';
import { JobPayloadConfig } from './sections/job-payload';
import { McpConfig } from './sections/mcp';
import { OutboxConfig } from './sections/outbox';
import { OutcomeSamplingConfig } from './sections/outcome-sampling';
import { PipelineSpansConfig } from './sections/pipeline-spans';
import { ProcessConfig } from './sections/process';
import { ReadsConfig } from './sections/reads';
import { RunnerAuthConfig } from './sections/runner-auth';
import { SelfTracingConfig } from './sections/self-tracing';
import { StoreConfig, storeProblems } from './sections/store';
import { WebhooksConfig } from './sections/webhooks';
import { variablesOf } from './variable';

/**
 * The environment as the service understands it: one section per feature, each a class of its variables with
 * their validation, defaults and docs (src/config/sections/). Every variable has a default that lets `npm start`
 * run with no other server (SPEC §8); production deployments override them. A service is handed the sections it
 * reads (ConfigModule provides each by its class), never a variable name.
 */
export const SECTIONS = {
  process: ProcessConfig,
  internalApi: InternalApiConfig,
  jobPayload: JobPayloadConfig,
  flags: FlagsConfig,
  runnerAuth: RunnerAuthConfig,
  collector: CollectorConfig,
  gateway: GatewayConfig,
  webhooks: WebhooksConfig,
  pipelineSpans: PipelineSpansConfig,
  outbox: OutboxConfig,
  outcomeSampling: OutcomeSamplingConfig,
  store: StoreConfig,
  reads: ReadsConfig,
  mcp: McpConfig,
  selfTracing: SelfTracingConfig,
} as const;

export type SectionName = keyof typeof SECTIONS;

/** The validated environment, `config.store.commandTimeoutMs` style. */
export type AppConfig = { readonly [Name in SectionName]: InstanceType<(typeof SECTIONS)[Name]> };

const sectionEntries = () => Object.entries(SECTIONS) as Array<[SectionName, ClassConstructor<object>]>;

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
    this.name = 'ConfigError';
  }
}

/** A password in a URL (`redis://:secret@host`) is never echoed back, even in a refusal. */
function withoutPassword(value: unknown): unknown {
  if (typeof value !== 'string' || !value.includes('@')) return value;
  return value.replace(/^([A-Za-z][A-Za-z0-9+.-]*:\/\/[^/@:]*):[^/@]*@/, '$1:***@');
}

/**
 * One line per bad variable, named as the user set it. class-validator's own messages start with the property
 * (`$property must be an integer number`, `each value in $property …`): that is the section's camelCase name, so
 * it is put back as the variable's.
 */
function describe(variable: string, error: ValidationError): string {
  const value = error.value === undefined ? 'unset' : JSON.stringify(withoutPassword(error.value));
  const named = new RegExp(`^(each value in )?${error.property}\\b`);
  const constraints = Object.values(error.constraints ?? {})
    .map((message) => message.replace(named, `$1${variable}`))
    .join('; ');
  return `${variable}: ${constraints} (got ${value})`;
}

/**
 * Every variable the service reads, with the section and property it lands in. Built when this module loads, and
 * refused then if a section's property (with a default or a validation decorator) names no variable or a variable
 * sits in two sections, so the list cannot fall behind the sections.
 */
const VARIABLES: ReadonlyMap<string, { readonly section: SectionName; readonly property: string }> = (() => {
  const table = new Map<string, { section: SectionName; property: string }>();
  for (const [section, type] of sectionEntries()) {
    const variables = variablesOf(type);
    const validated = getMetadataStorage()
      .getTargetValidationMetadatas(type, '', true, false)
      .map((metadata) => metadata.propertyName);
    for (const property of [...Object.keys(new type()), ...validated]) {
      if (!variables.has(property)) throw new Error(`${type.name}.${property} is read from no environment variable: give it @Variable`);
    }
    for (const [property, variable] of variables) {
      const other = table.get(variable);
      if (other !== undefined) throw new Error(`${variable} is in two sections, ${other.section} and ${section}`);
      table.set(variable, { section, property });
    }
  }
  return table;
})();

export const VARIABLE_NAMES: ReadonlySet<string> = new Set(VARIABLES.keys());

/** The value the service runs with for one variable, by its environment name (the docs' table, the deployment checks). */
export function valueOf(config: AppConfig, variable: string): unknown {
  const place = VARIABLES.get(variable);
  if (place === undefined) throw new Error(`${variable} is not a variable the service reads`);
  return (config[place.section] as unknown as Record<string, unknown>)[place.property];
}

/**
 * Reads and validates the environment once at start (SPEC §8). Throws a {@link ConfigError}
 * holding one line per bad variable; nothing else in the code base reads `process.env`.
 */
export function loadConfig(env: NodeJS.ProcessEnv | Record<string, string | undefined>): AppConfig {
  const problems: string[] = [];
  const sections: Partial<Record<SectionName, object>> = {};
  for (const [name, type] of sectionEntries()) {
    const variables = variablesOf(type);
    const provided: Record<string, string> = {};
    for (const [property, variable] of variables) {
      const value = env[variable];
      if (value !== undefined && value !== '') provided[property] = value;
    }
    const section = plainToInstance(type, provided);
    problems.push(...validateSync(section, { forbidUnknownValues: true }).map((error) => describe(variables.get(error.property)!, error)));
    sections[name] = section;
  }
  const config = sections as AppConfig;
  problems.push(...roleProblems(config), ...storeProblems(config.store));
  const publicUrlSet = config.jobPayload.gatewayPublicUrl !== undefined;
  if (!publicUrlSet) (config.jobPayload as { gatewayPublicUrl: string }).gatewayPublicUrl = defaultGatewayPublicUrl(config.process);
  if (problems.length === 0) problems.push(...addressProblems(config, publicUrlSet));
  if (problems.length > 0) throw new ConfigError(problems);
  for (const section of Object.values(config)) Object.freeze(section);
  return Object.freeze(config);
}
