export const UNLEASH_CLIENT = Symbol('UNLEASH_CLIENT');

export const TELEMETRY_FLAG = 'ci_job_telemetry';
export const SAMPLING_FLAG = 'ci_job_telemetry_sampling';
