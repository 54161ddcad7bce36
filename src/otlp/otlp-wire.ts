/**
 * Minimal protobuf wire-format reading and writing, just enough for the gateway to walk the envelope of an
 * OTLP export (resource → scope → item) and rewrite it without decoding what it does not touch.
 * Every untouched field is copied as the original bytes, so fields this code does not know (newer OTLP
 * versions, vendor extensions) reach the collector unchanged.
 */

/** A body that is not a well-formed OTLP export request (or response); the HTTP layer answers 400. */
export class OtlpPayloadError extends Error {
  override readonly name = 'OtlpPayloadError';
}

export const WIRE_VARINT = 0;
export const WIRE_FIXED64 = 1;
export const WIRE_LENGTH_DELIMITED = 2;
export const WIRE_START_GROUP = 3;
export const WIRE_END_GROUP = 4;
export const WIRE_FIXED32 = 5;

/** Forward-only reader over `buf[pos, end)`. Bounds are checked on every step: the input is untrusted. */
export class WireReader {
  pos: number;
  /** Tag of the field just read by `readTag`. */
  fieldNumber = 0;
  wireType = 0;

  constructor(
    readonly buf: Buffer,
    start: number,
    readonly end: number,
  ) {
    this.pos = start;
  }

  atEnd(): boolean {
    return this.pos >= this.end;
  }

  readTag(): void {
    const tag = this.readVarint();
    const fieldNumber = Math.floor(tag / 8);
    // Field numbers are 1 .. 2^29-1 (protobuf language guide); anything else cannot come from a real encoder.
    if (fieldNumber < 1 || fieldNumber > 0x1fffffff) {
      throw new OtlpPayloadError(`invalid protobuf field number ${fieldNumber} at byte ${this.pos}`);
    }
    this.fieldNumber = fieldNumber;
    this.wireType = tag % 8;
  }

  /** Unsigned varint as a number; exact up to 2^53, which covers every length and count the gateway reads. */
  readVarint(): number {
    const buf = this.buf;
    let pos = this.pos;
    let byte = pos < this.end ? buf[pos++] : -1;
    if (byte >= 0 && byte < 0x80) {
      this.pos = pos;
      return byte;
    }
    let value = 0;
    let multiplier = 1;
    for (let i = 0; i < 10; i++) {
      if (byte < 0) throw new OtlpPayloadError('truncated protobuf varint');
      value += (byte & 0x7f) * multiplier;
      if (byte < 0x80) {
        this.pos = pos;
        return value;
      }
      multiplier *= 128;
      byte = pos < this.end ? buf[pos++] : -1;
    }
    throw new OtlpPayloadError('protobuf varint longer than 10 bytes');
  }

  /** int64 varint as a number (two's complement, so negative values come back negative; lossy beyond 2^53). */
  readInt64(): number {
    const start = this.pos;
    const unsigned = this.readVarint();
    if (this.pos - start < 10) return unsigned;
    let value = 0n;
    for (let i = this.pos - 1; i >= start; i--) value = (value << 7n) | BigInt(this.buf[i] & 0x7f);
    return Number(BigInt.asIntN(64, value));
  }

  /** Reads a length prefix and returns the end offset of the delimited payload, which starts at `pos`. */
  readLengthDelimitedEnd(): number {
    const length = this.readVarint();
    const end = this.pos + length;
    if (end > this.end) throw new OtlpPayloadError('protobuf length-delimited field runs past its message');
    return end;
  }

  /** Skips the value of the field whose tag was just read. */
  skipValue(): void {
    switch (this.wireType) {
      case WIRE_VARINT:
        this.readVarint();
        return;
      case WIRE_FIXED64:
        this.advance(8);
        return;
      case WIRE_LENGTH_DELIMITED:
        this.pos = this.readLengthDelimitedEnd();
        return;
      case WIRE_FIXED32:
        this.advance(4);
        return;
      case WIRE_START_GROUP:
        this.skipGroup(this.fieldNumber);
        return;
      default:
        throw new OtlpPayloadError(`unexpected protobuf wire type ${this.wireType} for field ${this.fieldNumber}`);
    }
  }

  /** Reads a length-delimited field that the gateway interprets; any other wire type is a malformed body. */
  expectLengthDelimited(context: string): number {
    if (this.wireType !== WIRE_LENGTH_DELIMITED) {
      throw new OtlpPayloadError(`${context} (field ${this.fieldNumber}) has wire type ${this.wireType}, expected 2`);
    }
    return this.readLengthDelimitedEnd();
  }

  private advance(bytes: number): void {
    if (this.pos + bytes > this.end) throw new OtlpPayloadError('truncated protobuf fixed-width field');
    this.pos += bytes;
  }

  // Groups are obsolete but still valid wire format; an unknown field may legally be one. Iterative, so a
  // deeply nested group cannot overflow the stack.
  private skipGroup(fieldNumber: number): void {
    const open = [fieldNumber];
    while (open.length > 0) {
      if (this.atEnd()) throw new OtlpPayloadError('unterminated protobuf group');
      this.readTag();
      if (this.wireType === WIRE_END_GROUP) {
        if (open.pop() !== this.fieldNumber) throw new OtlpPayloadError('mismatched protobuf end-group tag');
      } else if (this.wireType === WIRE_START_GROUP) {
        open.push(this.fieldNumber);
      } else {
        this.skipValue();
      }
    }
  }
}

export function varintSize(value: number): number {
  let size = 1;
  while (value >= 128) {
    value = Math.floor(value / 128);
    size++;
  }
  return size;
}

export function writeVarint(target: Buffer, offset: number, value: number): number {
  while (value >= 128) {
    target[offset++] = (value % 128) | 0x80;
    value = Math.floor(value / 128);
  }
  target[offset++] = value;
  return offset;
}

/** Tag and length prefix of a length-delimited field. */
export function lengthDelimitedHeader(fieldNumber: number, length: number): Buffer {
  const tag = fieldNumber * 8 + WIRE_LENGTH_DELIMITED;
  const header = Buffer.allocUnsafe(varintSize(tag) + varintSize(length));
  writeVarint(header, writeVarint(header, 0, tag), length);
  return header;
}

export function encodeVarintField(fieldNumber: number, value: number): Buffer {
  const tag = fieldNumber * 8 + WIRE_VARINT;
  const field = Buffer.allocUnsafe(varintSize(tag) + varintSize(value));
  writeVarint(field, writeVarint(field, 0, tag), value);
  return field;
}

export function encodeBytesField(fieldNumber: number, payload: Buffer): Buffer {
  return Buffer.concat([lengthDelimitedHeader(fieldNumber, payload.length), payload]);
}

export function encodeStringField(fieldNumber: number, value: string): Buffer {
  return encodeBytesField(fieldNumber, Buffer.from(value, 'utf8'));
}

/**
 * The pieces of a rewritten message, in order. Consecutive copies of adjacent source ranges are coalesced,
 * so a message the gateway keeps whole stays a single slice of the request body (no copy until the final
 * concat).
 */
export class ChunkList {
  readonly chunks: Buffer[] = [];
  length = 0;
  private runStart = -1;
  private runEnd = -1;

  constructor(private readonly source: Buffer) {}

  copy(start: number, end: number): void {
    if (start === this.runEnd) {
      this.runEnd = end;
      return;
    }
    this.flush();
    this.runStart = start;
    this.runEnd = end;
  }

  push(chunk: Buffer): void {
    this.flush();
    this.chunks.push(chunk);
    this.length += chunk.length;
  }

  /** Appends `inner` as a length-delimited field `fieldNumber`. */
  pushMessage(fieldNumber: number, inner: ChunkList): void {
    inner.flush();
    this.push(lengthDelimitedHeader(fieldNumber, inner.length));
    this.pushAll(inner);
  }

  /** Appends every chunk of `other` as is. */
  pushAll(other: ChunkList): void {
    this.flush();
    other.flush();
    for (const chunk of other.chunks) this.chunks.push(chunk);
    this.length += other.length;
  }

  flush(): void {
    if (this.runStart < 0) return;
    this.chunks.push(this.source.subarray(this.runStart, this.runEnd));
    this.length += this.runEnd - this.runStart;
    this.runStart = -1;
    this.runEnd = -1;
  }

  toBuffer(): Buffer {
    this.flush();
    return Buffer.concat(this.chunks, this.length);
  }

  /** The message as its pieces, copied nowhere: joined only where it leaves (WireBody). */
  toWireBody(): WireBody {
    this.flush();
    return new WireBody(this.chunks, this.length);
  }
}

/**
 * A body as the pieces it was written in: slices of the request it came in and the few bytes the gateway wrote
 * (a resource's identity). Forwarding joins the pieces once, straight into the upstream request that carries
 * them (coalescing-collector-client.ts), rather than into a body of their own first and that request after.
 * On Node 22 and later every large Buffer a request allocates is external memory that V8 answers with a full
 * collection of the heap, not a young one as Node 20 did: a copy of each export saved is CPU saved on every
 * export (docs/performance.md, Node.js LTS).
 */
export class WireBody {
  private whole: Buffer | undefined;

  constructor(
    readonly pieces: readonly Buffer[],
    readonly length: number,
  ) {
    if (pieces.length === 1) this.whole = pieces[0];
  }

  static of(body: Buffer): WireBody {
    return new WireBody([body], body.length);
  }

  /** Writes the pieces into `target` from `offset`; answers the offset after them. */
  copyInto(target: Buffer, offset: number): number {
    for (const piece of this.pieces) offset += piece.copy(target, offset);
    return offset;
  }

  /** One Buffer, joined on first use and kept (the only piece itself when there is one). */
  joined(): Buffer {
    return (this.whole ??= Buffer.concat(this.pieces, this.length));
  }
}

/** A body given either way, as one Buffer. */
export function wholeBody(body: Buffer | WireBody): Buffer {
  return body instanceof WireBody ? body.joined() : body;
}
