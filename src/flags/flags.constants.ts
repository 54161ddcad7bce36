export const UNLEASH_CLIENT = Symbol('UNLEASH_CLIENT');

export const TELEMETRY_FLAG = 'ci_job_telemetry';
export const SAMPLING_FLAG = 'ci_job_telemetry_sampling';
/** SPEC §11: outcome-based sampling, per project like TELEMETRY_FLAG; its variant payload is the policy. */
export const OUTCOME_SAMPLING_FLAG = 'ci_job_telemetry_outcome_sampling';
