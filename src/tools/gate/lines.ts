/**
 * The gate's output framing, knowing nothing of JSON-RPC: the size limit of its lines (read by the
 * one line reader and handled in order by its sequencer, src/formats/lines.ts) and the per-pipe
 * queue the gate's output is coalesced in.
 */

/** Lines longer than this are refused (and skipped up to the next newline). */
export const MAX_LINE = 64 * 1024 * 1024;

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
