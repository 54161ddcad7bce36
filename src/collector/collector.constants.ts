/** The one client of the OTLP upstream (SPEC §6, §10), a CollectorClient shared by the gateway and the pipeline spans. */
export const COLLECTOR_CLIENT = Symbol('COLLECTOR_CLIENT');
