/**
 * Framing primitives of the gate, knowing nothing of JSON-RPC: the size limit of its lines (read
 * by the one line reader, src/formats/lines.ts), the sequencer that handles lines one at a time in
 * arrival order, and the per-pipe queue the gate's output is coalesced in.
 */

/** Lines longer than this are refused (and skipped up to the next newline). */
export const MAX_LINE = 64 * 1024 * 1024;

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
