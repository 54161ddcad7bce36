import { promisify } from 'node:util';
import { brotliCompress, brotliCompressSync, brotliDecompress, brotliDecompressSync, constants } from 'node:zlib';

/*
 * Parked bodies packed for Redis (issue 37). A parked export's bytes cross the socket and sit in Redis' memory until
 * its pipeline's outcome, and most are never read again (most provisional pipelines are dropped): at the
 * outcome-sampling bench's 46 KiB exports, Redis spent about 70 µs an export taking them in, and the service about
 * 30 µs writing them. Brotli at quality 0 packs such an export about 9× in about 25 µs (deflate at level 1 takes
 * twice that for about the same size) and unpacks it in about 35 µs, paid only by a kept pipeline's delivery.
 *
 * A packed body is one tag byte (0x00) and the Brotli stream. A body that starts with 0x00 itself is always packed,
 * so a body stored plain (small, incompressible, or written by a version before packing) never starts with it and is
 * read as it is. Parked bodies do not start with 0x00 anyway: a protobuf message's first byte is a field's tag (field 0
 * does not exist), JSON starts with `{` or white space, the control plane's spans with their outbox key.
 *
 * Bounds and budgets count a body's bytes as they would be forwarded (the entry's id carries them), never its packed
 * size: what an operator set as OUTCOME_SAMPLING_MAX_TOTAL_BYTES keeps its meaning, and Redis holds less than it.
 */
const PACKED_TAG = 0x00;
/** Smaller bodies stay plain: packing a few hundred bytes saves less than a hash field's own overhead. */
const PACK_MIN_BYTES = 1024;
/** Packed only when it saves an eighth at least: an export of random bytes is stored as it came. */
const PACK_MIN_SAVING = 1 / 8;
/** Up to this many plain bytes are packed and unpacked on the event loop (about 0.6 ms); larger ones in the pool. */
const INLINE_MAX_BYTES = 1024 * 1024;

/** Brotli's fastest setting. */
const FASTEST = { params: { [constants.BROTLI_PARAM_QUALITY]: 0 } };
const compressInPool = promisify(brotliCompress);
const decompressInPool = promisify(brotliDecompress);

/** The body as Redis keeps it: packed when that saves enough, else the body itself. */
export async function packedBody(body: Buffer): Promise<Buffer> {
  const tagged = body.length > 0 && body[0] === PACKED_TAG;
  if (body.length < PACK_MIN_BYTES && !tagged) return body;
  const packed = body.length <= INLINE_MAX_BYTES ? brotliCompressSync(body, FASTEST) : await compressInPool(body, FASTEST);
  if (packed.length + 1 > body.length * (1 - PACK_MIN_SAVING) && !tagged) return body;
  const stored = Buffer.allocUnsafe(packed.length + 1);
  stored[0] = PACKED_TAG;
  packed.copy(stored, 1);
  return stored;
}

/**
 * The body as it was parked. `bytes` is its plain size (from the entry's id): unpacking stops there, so a body damaged
 * in the store costs no more than that; one that does not unpack is an error, never a body sent on half read.
 */
export async function unpackedBody(stored: Buffer, bytes: number): Promise<Buffer> {
  if (stored.length === 0 || stored[0] !== PACKED_TAG) return stored;
  const packed = stored.subarray(1);
  const options = { maxOutputLength: Math.max(1, bytes) };
  const body = bytes <= INLINE_MAX_BYTES ? brotliDecompressSync(packed, options) : await decompressInPool(packed, options);
  if (body.length !== bytes) throw new Error(`a parked body unpacked to ${body.length} bytes, its entry says ${bytes}`);
  return body;
}
