/**
 * Framing primitives of the gate, knowing nothing of JSON-RPC: the line reader (LF-terminated
 * lines out of a byte stream, with the size limit), the sequencer that handles lines one at a time
 * in arrival order, and the per-pipe queue the gate's output is coalesced in.
 */

/** Lines longer than this are refused (and skipped up to the next newline). */
export const MAX_LINE = 64 * 1024 * 1024;

/** Splits a byte stream into LF-terminated lines without decoding (UTF-8 is validated per line). */
export class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;
  private skipping = false;
  constructor(
    private onLine: (line: Buffer) => void,
    private onOversize: () => void,
  ) {}
  push(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      if (nl < 0) break;
      const piece = chunk.subarray(start, nl);
      start = nl + 1;
      if (this.skipping) {
        this.skipping = false;
        this.parts = [];
        this.size = 0;
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
      this.onLine(line);
    }
    if (start < chunk.length && !this.skipping) {
      const rest = chunk.subarray(start);
      this.size += rest.length;
      if (this.size > MAX_LINE) {
        this.skipping = true;
        this.parts = [];
        this.size = 0;
        this.onOversize();
      } else this.parts.push(Buffer.from(rest));
    }
  }
  /** The final line without a LF (a client that ends without one still sent it). */
  end(): void {
    if (this.size > 0 && !this.skipping) {
      const line = Buffer.concat(this.parts);
      this.parts = [];
      this.size = 0;
      this.onLine(line);
    }
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
 * Lines queued for one pipe: the gate's own writing (ASCII strings) and lines forwarded as they
 * came (Buffers), written out as one Buffer.
 */
export class OutQueue {
  private parts: (Buffer | string)[] = [];
  private bytes = 0;
  get empty(): boolean {
    return this.parts.length === 0;
  }
  /** Adds one line (without its LF); strings are pure ASCII (stringifyAscii). */
  push(line: Buffer | string): void {
    this.parts.push(line);
    this.bytes += line.length + 1;
  }
  clear(): void {
    this.parts = [];
    this.bytes = 0;
  }
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.bytes);
    let off = 0;
    for (const p of this.parts) {
      off += typeof p === 'string' ? out.write(p, off, 'latin1') : p.copy(out, off);
      out[off++] = 0x0a;
    }
    this.clear();
    return out;
  }
}
