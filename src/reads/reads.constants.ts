/** Who runs the heavy half of each read (SPEC §12): the worker-thread pool over the configured backend (src/reads/reads-pool.ts). */
export const READS_RUNNER = Symbol('READS_RUNNER');
