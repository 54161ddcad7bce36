import { IsIn, IsString } from 'class-validator';
import { Integer, Text, Variable } from '../variable';

/** The process (SPEC §2, §8): which servers it runs, where they listen, how it logs, where it keeps its data. */
export class ProcessConfig {
  @Variable('ROLE') @IsIn(['all', 'control', 'gateway']) readonly role: 'all' | 'control' | 'gateway' = 'all';

  @Variable('HOST') @IsString() readonly host: string = '0.0.0.0';

  @Variable('INTERNAL_PORT') @Integer({ min: 0, max: 65535 }) readonly internalPort: number = 8080;

  @Variable('GATEWAY_PORT') @Integer({ min: 0, max: 65535 }) readonly gatewayPort: number = 4318;

  @Variable('LOG_LEVEL') @IsIn(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) readonly logLevel: string = 'info';

  /**
   * Where the embedded collector writes `otlp/<signal>.jsonl` (and the reads find them, and webhooks spool by
   * default); relative to the working directory, like `.secrets/`.
   */
  @Variable('DATA_DIR') @Text() readonly dataDir: string = '.data';
}
