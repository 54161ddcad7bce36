import { Grant } from '../../src/grants/grant';

/** A grant as the decorator stores it, for job 1001 unless overridden; digests stand in for real HMACs. */
export function testGrant(overrides: Partial<Grant> = {}): Grant {
  return {
    jobId: 1001,
    projectId: 7,
    pipelineId: 500,
    rootPipelineId: 500,
    runnerId: 17,
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanParentId: 'b7ad6b7169203331',
    runnerTokenDigest: 'a'.repeat(64),
    jobTokenDigest: 'b'.repeat(64),
    expiresAt: Date.now() + 60_000,
    ...overrides,
  };
}
