/**
 * The plain-HTTP path after the first request: every request on a kept-alive connection is judged by its own Host,
 * so the bytes from the agent cannot be a blind splice. This is a strict, bounded HTTP/1.x request framer (no
 * library: Node's own llhttp binding is internal): it finds each request head, checks its Host against the host
 * the connection was judged (and connected) for, and follows the body by Content-Length or chunked
 * Transfer-Encoding to the next head. Anything it cannot frame exactly is refused, never passed on: a server that
 * framed it differently would read a request the proxy never saw.
 *
 * Total: any byte string gives a result, never an exception (a fuzz test holds it to that).
 */
import { parseHttpHost } from './peek.js';

/** Bounds of one request head. */
export const HTTP_HEAD_MAX = 16 * 1024;
export const HTTP_HEADERS_MAX = 100;
/** A chunk-size line (hex digits, extensions) longer than this is refused. */
const CHUNK_LINE_MAX = 1024;

export type GateRefusal =
  /** A request names another host than the one the connection was judged for: 403 and close. */
  | { reason: 'http_host_changed'; host: string | null; status: 403 }
  /** A request the framer cannot frame exactly: 400 and close. */
  | { reason: 'http_malformed'; why: string; status: 400 };

export interface GateStep {
  /** Bytes to pass upstream, in order (parts of `push`'s input). */
  forward: Buffer[];
  /** Set when a request was refused: nothing from it (or after it) is in `forward`. */
  refused?: GateRefusal;
  /**
   * The request just forwarded asks to leave HTTP (Upgrade, CONNECT): hold further bytes until the response shows
   * whether the server agreed (`upgraded`), and pass none of them on before.
   */
  awaitUpgrade?: true;
}

type State =
  | { s: 'head' }
  | { s: 'body'; left: number }
  | { s: 'chunk-size' }
  | { s: 'chunk-data'; left: number }
  | { s: 'chunk-data-crlf' }
  | { s: 'trailer' }
  | { s: 'upgrade-wait' }
  | { s: 'opaque' }
  | { s: 'refused' };

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

export class HttpRequestGate {
  private st: State = { s: 'head' };
  private buf: Buffer = Buffer.alloc(0);
  private requests = 0;
  /** Bytes held while waiting for the answer to an upgrade. */
  private held: Buffer[] = [];
  /** The request awaiting its answer is a CONNECT (a 2xx agrees) rather than an Upgrade (only a 101 does). */
  connect = false;

  /** `host`: the name the connection was judged for (null when the first request named none). */
  constructor(readonly host: string | null) {}

  /** Requests whose head was seen so far. */
  get count(): number {
    return this.requests;
  }

  get state(): State['s'] {
    return this.st.s;
  }

  /** Feeds bytes from the agent; returns what may go upstream. */
  push(chunk: Buffer): GateStep {
    const forward: Buffer[] = [];
    if (this.st.s === 'opaque') return { forward: [chunk] };
    if (this.st.s === 'refused') return { forward };
    if (this.st.s === 'upgrade-wait') {
      this.held.push(chunk);
      return { forward };
    }
    let data = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    this.buf = Buffer.alloc(0);
    let off = 0;
    while (off < data.length) {
      const st = this.st;
      if (st.s === 'head') {
        const end = headEnd(data, off);
        if (end < 0) {
          if (data.length - off > HTTP_HEAD_MAX) return this.refuse(forward, malformed('head_too_large'));
          this.buf = Buffer.from(data.subarray(off));
          return { forward };
        }
        if (end - off > HTTP_HEAD_MAX) return this.refuse(forward, malformed('head_too_large'));
        const head = data.subarray(off, end);
        const r = this.judgeHead(head);
        if ('reason' in r) return this.refuse(forward, r);
        this.requests++;
        forward.push(head);
        off = end;
        this.st = r.next;
        if (r.next.s === 'upgrade-wait') {
          if (off < data.length) this.held.push(Buffer.from(data.subarray(off)));
          return { forward, awaitUpgrade: true };
        }
      } else if (st.s === 'body' || st.s === 'chunk-data') {
        const n = Math.min(st.left, data.length - off);
        forward.push(data.subarray(off, off + n));
        off += n;
        st.left -= n;
        if (st.left === 0) this.st = st.s === 'body' ? { s: 'head' } : { s: 'chunk-data-crlf' };
      } else if (st.s === 'chunk-data-crlf') {
        if (data.length - off < 2) break;
        if (data[off] !== 0x0d || data[off + 1] !== 0x0a) return this.refuse(forward, malformed('chunk_no_crlf'));
        forward.push(data.subarray(off, off + 2));
        off += 2;
        this.st = { s: 'chunk-size' };
      } else if (st.s === 'chunk-size' || st.s === 'trailer') {
        const nl = lineEnd(data, off);
        if (nl < 0) {
          if (data.length - off > (st.s === 'trailer' ? HTTP_HEAD_MAX : CHUNK_LINE_MAX))
            return this.refuse(forward, malformed('chunk_line_too_long'));
          break;
        }
        const line = data.subarray(off, nl - 2).toString('latin1');
        forward.push(data.subarray(off, nl));
        off = nl;
        if (st.s === 'trailer') {
          if (line === '') this.st = { s: 'head' };
          else if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e]*$/.test(line))
            return this.refuse(forward.slice(0, -1), malformed('bad_trailer'));
          continue;
        }
        const m = /^([0-9a-fA-F]{1,15})(;[\t\x20-\x7e]*)?$/.exec(line);
        if (!m) return this.refuse(forward.slice(0, -1), malformed('bad_chunk_size'));
        const size = parseInt(m[1]!, 16);
        this.st = size === 0 ? { s: 'trailer' } : { s: 'chunk-data', left: size };
      } else break;
    }
    if (off < data.length) this.buf = Buffer.from(data.subarray(off));
    data = Buffer.alloc(0);
    return { forward };
  }

  /**
   * The server's answer to the upgrade (its first response bytes): a 101 (or 2xx to CONNECT) makes the connection
   * opaque from here on and releases what was held; anything else resumes framing the held bytes.
   */
  upgraded(agreed: boolean): GateStep {
    if (this.st.s !== 'upgrade-wait') return { forward: [] };
    const held = this.held;
    this.held = [];
    if (agreed) {
      this.st = { s: 'opaque' };
      return { forward: held };
    }
    this.st = { s: 'head' };
    const all: GateStep = { forward: [] };
    for (const h of held) {
      const step = this.push(h);
      all.forward.push(...step.forward);
      if (step.refused) return { ...all, refused: step.refused };
      if (step.awaitUpgrade) return { ...all, awaitUpgrade: true };
    }
    return all;
  }

  private refuse(forward: Buffer[], r: GateRefusal): GateStep {
    this.st = { s: 'refused' };
    this.buf = Buffer.alloc(0);
    return { forward, refused: r };
  }

  private judgeHead(head: Buffer): GateRefusal | { next: State } {
    // The line structure, strictly: CRLF line ends only, no obsolete line folding, no whitespace before a colon.
    const text = head.toString('latin1');
    if (!text.endsWith('\r\n\r\n')) return malformed('bare_lf');
    const lines = text.slice(0, -4).split('\r\n');
    if (lines.some((l) => l.includes('\n') || l.includes('\r'))) return malformed('bare_lf');
    const reqLine = lines[0]!.split(' ');
    if (reqLine.length !== 3 || !TOKEN.test(reqLine[0]!) || !/^HTTP\/1\.[01]$/.test(reqLine[2]!))
      return malformed('bad_request_line');
    if (!/^[\x21-\x7e]+$/.test(reqLine[1]!)) return malformed('bad_request_line');
    if (lines.length - 1 > HTTP_HEADERS_MAX) return malformed('too_many_headers');
    const method = reqLine[0]!;
    let te: string | null = null;
    const cl: string[] = [];
    let upgrade = false;
    for (const l of lines.slice(1)) {
      const colon = l.indexOf(':');
      if (colon <= 0 || !TOKEN.test(l.slice(0, colon))) return malformed('bad_header');
      const value = l.slice(colon + 1).trim();
      if (!/^[\t\x20-\x7e\x80-\xff]*$/.test(value)) return malformed('bad_header');
      const name = l.slice(0, colon).toLowerCase();
      if (name === 'transfer-encoding') {
        if (te !== null) return malformed('two_transfer_encodings');
        te = value.toLowerCase();
      } else if (name === 'content-length') cl.push(value);
      else if (name === 'upgrade') upgrade = true;
    }
    const h = parseHttpHost(head);
    if (h.kind !== 'http') return malformed('bad_head');
    if (h.conflict || h.host !== this.host) return { reason: 'http_host_changed', host: h.host, status: 403 };
    // Framing exactly as RFC 9112 6.3, refusing what a server might read differently (request smuggling).
    let next: State = { s: 'head' };
    if (te !== null) {
      if (cl.length) return malformed('transfer_encoding_and_content_length');
      if (te !== 'chunked') return malformed('transfer_encoding_not_chunked');
      next = { s: 'chunk-size' };
    } else if (cl.length) {
      if (cl.some((v) => v !== cl[0]) || !/^\d{1,15}$/.test(cl[0]!)) return malformed('bad_content_length');
      const n = Number(cl[0]);
      if (n > 0) next = { s: 'body', left: n };
    }
    if (method === 'CONNECT' || upgrade) {
      // Only as the first request: its response is then the first bytes the server sends, so a 101/2xx can be
      // recognised without parsing earlier responses. A body would be ambiguous with the upgraded stream.
      if (this.requests > 0) return malformed('upgrade_not_first');
      if (next.s !== 'head') return malformed('upgrade_with_body');
      this.connect = method === 'CONNECT';
      if (method === 'CONNECT') {
        const target = reqLine[1]!.toLowerCase();
        const name = target.startsWith('[') ? null : target.replace(/:\d{1,5}$/, '');
        if (name !== this.host) return { reason: 'http_host_changed', host: name, status: 403 };
      }
      return { next: { s: 'upgrade-wait' } };
    }
    return { next };
  }
}

function malformed(why: string): GateRefusal {
  return { reason: 'http_malformed', why, status: 400 };
}

/** Index just past the CRLFCRLF ending a head that starts at `off`, or -1 (also on a bare LF LF, refused later). */
function headEnd(b: Buffer, off: number): number {
  for (let i = off; i + 1 < b.length; i++) {
    if (b[i] !== 0x0a) continue;
    if (b[i + 1] === 0x0a) return i + 2;
    if (b[i + 1] === 0x0d && i + 2 < b.length && b[i + 2] === 0x0a) return i + 3;
  }
  return -1;
}

/** Index just past the CRLF ending the line at `off`, or -1. */
function lineEnd(b: Buffer, off: number): number {
  for (let i = off; i + 1 < b.length; i++) if (b[i] === 0x0d && b[i + 1] === 0x0a) return i + 2;
  return -1;
}

/**
 * Whether a response's first bytes say the server agreed to leave HTTP: a 101 to an Upgrade, a 2xx to a CONNECT.
 * null while fewer than the status line's first 12 bytes are there.
 */
export function upgradeAgreed(first: Buffer, connect: boolean): boolean | null {
  const s = first.subarray(0, 12).toString('latin1');
  if (s.length < 12) return null;
  const m = /^HTTP\/1\.[01] (\d{3})$/.exec(s);
  if (!m) return false;
  const code = Number(m[1]);
  return connect ? code >= 200 && code < 300 : code === 101;
}

/** The answer to a refused request; the connection is closed after it. */
export function refusalResponse(r: GateRefusal): Buffer {
  const text = r.status === 403 ? 'Forbidden' : 'Bad Request';
  return Buffer.from(`HTTP/1.1 ${r.status} ${text}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
}
