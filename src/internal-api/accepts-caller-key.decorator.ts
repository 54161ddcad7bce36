import { SetMetadata } from '@nestjs/common';
import { ACCEPTS_CALLER_KEY } from './internal-api.constants';

/** The route also accepts a configured caller key in place of the internal-API JWT (SPEC §3). */
export const AcceptsCallerKey = () => SetMetadata(ACCEPTS_CALLER_KEY, true);
