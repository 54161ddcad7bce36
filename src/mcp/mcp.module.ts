import { DynamicModule, Module } from '@nestjs/common';
import { InternalApiModule } from '../internal-api/internal-api.module';
import { McpRoute } from './mcp.route';

/** SPEC §14: the MCP server on the internal port, over the reads of SPEC §12 and §13. */
@Module({})
export class McpModule {
  /**
   * Over the reads module the app already imports (the same object, so Nest builds it once: one worker pool, one
   * ReadsService, for the HTTP reads and the tools alike).
   */
  static over(reads: DynamicModule): DynamicModule {
    return { module: McpModule, imports: [InternalApiModule, reads], providers: [McpRoute] };
  }
}
