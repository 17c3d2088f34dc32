/**
 * The one line reader of JSON lines in Leash: LF-terminated lines out of a byte stream, never
 * decoded here (invalid UTF-8 reaches the strict parser, src/formats/json.ts, instead of being
 * replaced), with a byte limit. A line longer than `maxBytes` is reported once (`onOversize`) and
 * skipped up to its newline; nothing beyond the limit is ever buffered. Used by the `leash mcp`
 * gate (both pipes), `leash terminal`'s stdio, the service's tools socket (both ends), the
 * terminal's policy client, `leash mcp learn` and the watcher's map protocol. Also here: the
 * sequencer that handles lines one at a time in arrival order, and jsonLines for a whole text.
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

  /** No part of a line is held (nor an over-long one being skipped): the next chunk starts a line. */
  get idle(): boolean {
    return this.size === 0 && !this.skipping;
  }

  /**
   * Reads `chunk` up to the end of the line held (all of it when it holds no LF) and returns the rest, which starts
   * a line: the whole chunk when nothing is held.
   */
  finishLine(chunk: Buffer): Buffer {
    if (this.idle) return chunk;
    const nl = chunk.indexOf(0x0a);
    const cut = nl < 0 ? chunk.length : nl + 1;
    this.push(chunk.subarray(0, cut));
    return chunk.subarray(cut);
  }

  /** Reads the one line of `chunk` starting at `at` (without a LF after it, the rest, held): where the next starts. */
  pushOne(chunk: Buffer, at: number): number {
    const nl = chunk.indexOf(0x0a, at);
    const cut = nl < 0 ? chunk.length : nl + 1;
    if (cut > at) this.push(chunk.subarray(at, cut));
    return cut;
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

/**
 * Runs `handle(ctx, item)` one item at a time in arrival order; synchronous handlers never allocate
 * a promise. The context is passed rather than bound so the handler is called without a closure.
 */
export class Sequencer<C, T> {
  private queue: T[] = [];
  private busy = false;
  onIdle: (() => void) | null = null;
  constructor(
    private handle: (ctx: C, item: T) => void | Promise<void>,
    private ctx: C,
  ) {}
  get idle(): boolean {
    return !this.busy && this.queue.length === 0;
  }
  push(item: T): void {
    if (this.busy) {
      this.queue.push(item);
      return;
    }
    this.run(item);
  }
  private run(item: T | undefined): void {
    while (item !== undefined) {
      const r = this.handle(this.ctx, item);
      if (r) {
        this.busy = true;
        r.then(
          () => this.resume(),
          () => this.resume(),
        );
        return;
      }
      item = this.queue.shift();
    }
    this.onIdle?.();
  }
  private resume(): void {
    this.busy = false;
    this.run(this.queue.shift());
  }
}

/**
 * The JSON lines of a whole text (a file read at once: an audit trail, a decision log): each line
 * `keep` accepts (default: every non-empty one) parsed; one that is not JSON is counted in `bad`
 * (a partial last line of a file being written, or a line that is not a record).
 */
export function jsonLines(
  text: string,
  keep: (line: string) => boolean = (l) => l !== '',
): { values: unknown[]; bad: number } {
  const values: unknown[] = [];
  let bad = 0;
  for (const line of text.split('\n')) {
    if (!keep(line)) continue;
    try {
      values.push(JSON.parse(line));
    } catch {
      bad++;
    }
  }
  return { values, bad };
}
