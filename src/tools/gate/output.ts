/**
 * The gate's writing to both pipes: messages are queued per pipe and flushed once per input chunk,
 * the judge's held-back decision lines first; writes to the server are watched for back-pressure
 * (a server that stops reading its input is a stall, handed to the lifecycle). The line limit is
 * here too (lines are read by the one line reader, src/formats/lines.ts).
 */
import { stalled } from './lifecycle.js';
import { performance } from 'node:perf_hooks';
import { stringifyAscii, type JsonValue } from '../../formats/json.js';
import type { GateState } from './gate.js';

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

// Output is coalesced per input chunk: every message produced while handling one chunk read from
// either side goes out in one write per pipe, in a microtask once the chunk's lines are handled
// (a write per message costs a syscall each and dominated the gate's CPU). Waiting for the end
// of the event-loop turn instead measured slower: the next process in the pipeline then starts
// later. The judge's held-back decision-log lines are written first, so an allowed call's line
// is in the log before the call reaches the server.
export function flushAll(g: GateState): void {
  g.flushQueued = false;
  g.judge.flush?.();
  flushServer(g);
  flushClient(g);
}

function scheduleFlush(g: GateState): void {
  if (!g.flushQueued) {
    g.flushQueued = true;
    queueMicrotask(g.flushAll);
  }
}

// Writes to the server with stall detection: each write's callback fires when the kernel took it.
export function flushServer(g: GateState): void {
  if (g.serverOut.empty) return;
  const sin = g.sin;
  if (g.serverExited || sin.destroyed || sin.writableEnded) return g.serverOut.clear();
  const s = g.serverOut.take();
  if (g.timeoutMs > 0) {
    g.unflushed.push(performance.now());
    if (g.stallTimer === null) g.stallTimer = setTimeout(checkStall, g.timeoutMs, g);
    sin.write(s, g.onFlushed);
  } else sin.write(s);
}

function checkStall(g: GateState): void {
  g.stallTimer = null;
  if (g.unflushed.length === 0 || g.finished) return;
  const age = performance.now() - g.unflushed[0]!;
  if (age >= g.timeoutMs) stalled(g);
  else g.stallTimer = setTimeout(checkStall, g.timeoutMs - age, g);
}

export function flushClient(g: GateState): void {
  if (g.clientOut.empty || g.outClosed) return;
  g.o.output.write(g.clientOut.take());
}

/** Queues a message for the server: `raw` is its line as received when that is canonical already. */
export function toServer(g: GateState, v: JsonValue, raw: Buffer | null): void {
  g.serverOut.push(raw ?? stringifyAscii(v));
  scheduleFlush(g);
}

/** Queues a message for the client (`raw` as for toServer). */
export function toClient(g: GateState, v: JsonValue, raw: Buffer | null = null): void {
  if (g.outClosed) return;
  g.clientOut.push(raw ?? stringifyAscii(v));
  scheduleFlush(g);
}
