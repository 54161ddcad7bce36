/** The one client of the OTLP upstream (SPEC §6, §10), shared by the gateway and the pipeline spans. */
export const OTLP_UPSTREAM = Symbol('OTLP_UPSTREAM');
