import type net from 'node:net';
import { nativeProxy } from '../../../native.js';
import type { SplicerInstance } from '../addon.js';

/**
 * Moves an allowed connection's bytes with splice(2) on the addon's pump thread instead of through JavaScript
 * (a Node pipe costs about half of bulk throughput). The sockets stay open in Node, with reading stopped, until
 * the pump reports that both directions closed (or one failed); only then are they destroyed.
 */
export interface SplicePump {
  /**
   * Splices `a` <-> `b`. `done` resolves with the errno name of a failure (null on a clean close of both sides);
   * until then the caller must not destroy either socket (abort first).
   */
  start(a: net.Socket, b: net.Socket): { id: number; done: Promise<SpliceResult> };
  /**
   * Connects to ip:port (bounded by `timeoutMs`) and splices the descriptor `fd` with it once connected. Both
   * descriptors (`fd` and the returned `upFd`) are the caller's to close after `done`, unless `closeOnClean` is set
   * and the pair ended cleanly (`closed` in the result): the pump closed them. Throws (EMFILE, ...) when the socket
   * cannot be made.
   */
  connect(
    fd: number,
    ip: string,
    port: number,
    timeoutMs: number,
    closeOnClean?: boolean,
  ): { id: number; upFd: number; done: Promise<SpliceResult> };
  abort(id: number): void;
  /** Active pairs. */
  size(): number;
  /** The native pump itself (the acceptor's native verdict path connects through it), when inline. */
  readonly native: SplicerInstance | null;
  close(): void;
}

export interface SpliceResult {
  error: string | null;
  ab: number;
  ba: number;
  /** False when a connect() pair's upstream never connected (`error` says why). */
  connected: boolean;
  /** True when the pump closed both descriptors (connect with closeOnClean, ended cleanly). */
  closed: boolean;
}

interface Handle {
  fd?: number;
  reading?: boolean;
  readStop?: () => number;
}

function handleOf(s: net.Socket): Handle | null {
  return (s as unknown as { _handle?: Handle | null })._handle ?? null;
}

/**
 * Stops Node reading a socket and returns what it had already read but not delivered. Node's own `pause()` only
 * stops delivery; libuv would keep reading into the stream buffer, and those bytes would be lost to the pump.
 */
export function stopReading(s: net.Socket): Buffer {
  s.pause();
  const h = handleOf(s);
  if (h?.readStop) {
    h.readStop();
    // Left true on purpose: Socket._read() restarts libuv reading only when `reading` is false, and the
    // read() calls below (or any later one) would otherwise do exactly that.
    h.reading = true;
  }
  const parts: Buffer[] = [];
  for (let chunk = s.read() as Buffer | null; chunk !== null; chunk = s.read() as Buffer | null) parts.push(chunk);
  return Buffer.concat(parts);
}

const ERRNO: Record<number, string> = {
  104: 'ECONNRESET',
  32: 'EPIPE',
  125: 'ECANCELED',
  110: 'ETIMEDOUT',
  24: 'EMFILE',
  111: 'ECONNREFUSED',
  113: 'EHOSTUNREACH',
  101: 'ENETUNREACH',
  23: 'ENFILE',
  12: 'ENOMEM',
};

/**
 * The pump, or null when the addon (or its Splicer) is not available: the caller then pipes in JavaScript.
 * `inline` (default): on Node's own event loop, one thread for accept, decision and bytes, as nginx's worker;
 * false: on a thread of its own (each report then crosses threads).
 */
export function createSplicePump(o: { inline?: boolean } = {}): SplicePump | null {
  let native: SplicerInstance;
  const waiting = new Map<number, (r: SpliceResult) => void>();
  try {
    const { Splicer } = nativeProxy();
    if (typeof Splicer !== 'function') return null;
    native = new Splicer(
      (id, errno, ab, ba, connected, closed) => {
        const done = waiting.get(id);
        waiting.delete(id);
        done?.({ error: errno === 0 ? null : (ERRNO[errno] ?? `E${errno}`), ab, ba, connected, closed });
      },
      { inline: o.inline !== false },
    );
  } catch {
    return null;
  }
  return {
    start(a, b) {
      const fa = handleOf(a)?.fd ?? -1;
      const fb = handleOf(b)?.fd ?? -1;
      if (fa < 0 || fb < 0)
        return { id: -1, done: Promise.resolve({ error: 'EBADF', ab: 0, ba: 0, connected: true, closed: false }) };
      const id = native.add(fa, fb);
      return { id, done: new Promise<SpliceResult>((resolve) => waiting.set(id, resolve)) };
    },
    connect(fd, ip, port, timeoutMs, closeOnClean = false) {
      const [id, upFd] = native.connect(fd, ip, port, timeoutMs, closeOnClean);
      return { id, upFd, done: new Promise<SpliceResult>((resolve) => waiting.set(id, resolve)) };
    },
    abort(id) {
      if (waiting.has(id)) native.abort(id);
    },
    size: () => waiting.size,
    native: o.inline !== false ? native : null,
    close() {
      native.close();
    },
  };
}
