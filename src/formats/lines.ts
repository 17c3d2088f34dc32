/**
 * The one line reader of JSON lines in Leash: LF-terminated lines out of a byte stream, never
 * decoded here (invalid UTF-8 reaches the strict parser, src/formats/json.ts, instead of being
 * replaced), with a byte limit. A line longer than `maxBytes` is reported once (`onOversize`) and
 * skipped up to its newline; nothing beyond the limit is ever buffered. Used by the `leash mcp`
 * gate (both pipes), `leash terminal`'s stdio, the service's tools socket (both ends), the
 * terminal's policy client, `leash mcp learn` and the watcher's map protocol.
 */

export interface LineReaderOptions {
  /** Lines longer than this many bytes (without the LF) are refused. */
  maxBytes: number;
}

export class LineReader {
  private parts: Buffer[] = [];
  private size = 0;
  private skipping = false;
  private readonly maxBytes: number;
  constructor(
    private readonly onLine: (line: Buffer) => void,
    private readonly onOversize: () => void,
    opts: LineReaderOptions,
  ) {
    this.maxBytes = opts.maxBytes;
  }

  push(chunk: Buffer | string): void {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    let start = 0;
    for (;;) {
      const nl = buf.indexOf(0x0a, start);
      if (nl < 0) break;
      const piece = buf.subarray(start, nl);
      start = nl + 1;
      if (this.skipping) {
        this.skipping = false;
        continue;
      }
      let line: Buffer;
      if (this.size === 0) line = piece;
      else {
        this.parts.push(piece);
        line = Buffer.concat(this.parts);
        this.parts = [];
        this.size = 0;
      }
      if (line.length > this.maxBytes) this.onOversize();
      else this.onLine(line);
    }
    if (start < buf.length && !this.skipping) {
      const rest = buf.subarray(start);
      this.size += rest.length;
      if (this.size > this.maxBytes) {
        this.skipping = true;
        this.parts = [];
        this.size = 0;
        this.onOversize();
      } else this.parts.push(Buffer.from(rest));
    }
  }

  /** The final line without a LF (a peer that ends without one still sent it). */
  end(): void {
    if (this.size > 0 && !this.skipping) {
      const line = Buffer.concat(this.parts);
      this.parts = [];
      this.size = 0;
      this.onLine(line);
    }
    this.parts = [];
    this.size = 0;
  }
}
