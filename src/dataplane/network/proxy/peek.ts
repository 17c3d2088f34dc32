/**
 * Reading the destination name from the first bytes of a connection, without decrypting anything:
 * the TLS ClientHello's server_name, or the HTTP/1.x Host header. Both parsers are total: any byte string gives a
 * result, never an exception (a fuzz test holds them to that).
 */

export type PeekResult =
  /** The bytes so far are a prefix of something parseable: read more (within the size/time bounds). */
  | { kind: 'more' }
  /**
   * A ClientHello; `sni` null when it carries no (valid) host_name. `ech` when it carries an
   * encrypted_client_hello extension (0xfe0d): `sni` is then only the outer (public) name.
   */
  | { kind: 'tls'; sni: string | null; ech?: true }
  /** An HTTP/1.x request head; `host` null when absent or invalid. `conflict` when two names disagree. */
  | { kind: 'http'; host: string | null; conflict: boolean }
  /** Neither TLS nor HTTP (or malformed): judge by address only. */
  | { kind: 'other'; why: string };

/** Default bounds for the proxy's peek. */
export const PEEK_MAX_BYTES = 16 * 1024;
export const PEEK_TIMEOUT_MS = 5000;

const HOST_RE = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/;

/** Lower-cases and validates a DNS name; null when it is not one (an IP literal is not a name either). */
export function normaliseHostname(raw: string): string | null {
  const h = raw.toLowerCase();
  if (!HOST_RE.test(h)) return null;
  const bare = h.endsWith('.') ? h.slice(0, -1) : h;
  if (/^[0-9.]+$/.test(bare)) return null;
  return bare;
}

/** Dispatches on the first byte: 0x16 is a TLS handshake record, an ASCII letter may be an HTTP method. */
export function peekDestination(buf: Uint8Array): PeekResult {
  if (buf.length === 0) return { kind: 'more' };
  if (buf[0] === 0x16) return parseClientHello(buf);
  const c = buf[0]!;
  if (c >= 0x41 && c <= 0x5a) return parseHttpHost(buf);
  return { kind: 'other', why: 'not_tls_or_http' };
}

// --- TLS -------------------------------------------------------------------------------------------------------

/**
 * Parses a ClientHello that may be fragmented over several TLS records (and so over TCP segments): handshake
 * bytes are reassembled from consecutive handshake records until the ClientHello's declared length is present.
 */
export function parseClientHello(buf: Uint8Array): PeekResult {
  // Each record's handshake bytes, as views of `buf` (no copy); joined only when the hello spans records.
  const parts: Uint8Array[] = [];
  let have = 0;
  let off = 0;
  let need = -1;
  const joined = () => (parts.length === 1 ? parts[0]! : Buffer.concat(parts, have));
  while (true) {
    if (off + 5 > buf.length) return { kind: 'more' };
    const type = buf[off]!;
    const major = buf[off + 1]!;
    const len = (buf[off + 3]! << 8) | buf[off + 4]!;
    if (type !== 0x16) return { kind: 'other', why: 'tls_not_handshake' };
    if (major !== 3) return { kind: 'other', why: 'tls_bad_version' };
    if (len === 0 || len > 16384 + 2048) return { kind: 'other', why: 'tls_bad_record_length' };
    const end = off + 5 + len;
    const avail = Math.min(end, buf.length);
    if (avail > off + 5) {
      parts.push(buf.subarray(off + 5, avail));
      have += avail - off - 5;
    }
    if (need < 0 && have >= 4) {
      const hs = joined();
      if (hs[0] !== 0x01) return { kind: 'other', why: 'tls_not_client_hello' };
      need = 4 + ((hs[1]! << 16) | (hs[2]! << 8) | hs[3]!);
      if (need > 0x10000 + 4) return { kind: 'other', why: 'tls_hello_too_long' };
    }
    if (need >= 0 && have >= need) return parseHelloBody(joined().subarray(4, need));
    if (end > buf.length) return { kind: 'more' };
    off = end;
  }
}

/** encrypted_client_hello (draft-ietf-tls-esni): its presence means the real name is encrypted. */
export const TLS_EXT_ECH = 0xfe0d;

function parseHelloBody(b: Uint8Array): PeekResult {
  // legacy_version(2) random(32) session_id<1> cipher_suites<2> compression<1> extensions<2>
  let p = 34;
  if (p + 1 > b.length) return { kind: 'other', why: 'tls_truncated' };
  p += 1 + b[p]!;
  if (p + 2 > b.length) return { kind: 'other', why: 'tls_truncated' };
  p += 2 + ((b[p]! << 8) | b[p + 1]!);
  if (p + 1 > b.length) return { kind: 'other', why: 'tls_truncated' };
  p += 1 + b[p]!;
  if (p === b.length) return { kind: 'tls', sni: null }; // no extensions at all
  if (p + 2 > b.length) return { kind: 'other', why: 'tls_truncated' };
  const extEnd = p + 2 + ((b[p]! << 8) | b[p + 1]!);
  if (extEnd > b.length) return { kind: 'other', why: 'tls_truncated' };
  p += 2;
  let sni: string | null = null;
  let seen = false;
  let ech = false;
  while (p + 4 <= extEnd) {
    const type = (b[p]! << 8) | b[p + 1]!;
    const len = (b[p + 2]! << 8) | b[p + 3]!;
    p += 4;
    if (p + len > extEnd) return { kind: 'other', why: 'tls_truncated' };
    if (type === 0) {
      // A second server_name extension is a protocol violation a server may resolve differently from us.
      if (seen) return { kind: 'other', why: 'tls_duplicate_sni' };
      seen = true;
      const parsed = parseServerName(b.subarray(p, p + len));
      if (parsed === undefined) return { kind: 'other', why: 'tls_bad_sni' };
      sni = parsed;
    }
    if (type === TLS_EXT_ECH) ech = true;
    p += len;
  }
  return ech ? { kind: 'tls', sni, ech: true } : { kind: 'tls', sni };
}

/** server_name_list: one host_name entry (type 0). undefined when malformed, null when no usable name. */
function parseServerName(e: Uint8Array): string | null | undefined {
  if (e.length < 2) return undefined;
  const listEnd = 2 + ((e[0]! << 8) | e[1]!);
  if (listEnd > e.length) return undefined;
  let p = 2;
  let name: string | null = null;
  while (p + 3 <= listEnd) {
    const t = e[p]!;
    const len = (e[p + 1]! << 8) | e[p + 2]!;
    p += 3;
    if (p + len > listEnd) return undefined;
    if (t === 0) {
      if (name !== null) return undefined;
      let s = '';
      for (let i = p; i < p + len; i++) s += String.fromCharCode(e[i]!);
      name = normaliseHostname(s);
      if (name === null) return undefined;
    }
    p += len;
  }
  return name;
}

// --- HTTP ------------------------------------------------------------------------------------------------------

const METHOD_RE = /^[A-Z]{1,16}$/;

/** Reads the Host of an HTTP/1.x request head; an absolute-form target that names a different host is a conflict. */
export function parseHttpHost(buf: Uint8Array): PeekResult {
  // Find the end of the head (CRLFCRLF, tolerating bare LF) without decoding more than needed.
  let end = -1;
  for (let i = 0; i + 1 < buf.length; i++) {
    if (buf[i] === 0x0a && (buf[i + 1] === 0x0a || (buf[i + 1] === 0x0d && buf[i + 2] === 0x0a))) {
      end = i;
      break;
    }
  }
  // Check the request line as far as we have it, so non-HTTP fails fast instead of waiting for the timeout.
  const firstLineEnd = buf.indexOf(0x0a);
  const lineBytes = buf.subarray(0, firstLineEnd < 0 ? Math.min(buf.length, 8192) : firstLineEnd);
  let line = '';
  for (const c of lineBytes) {
    if (c === 0x0d) continue;
    if (c < 0x20 || c > 0x7e) return { kind: 'other', why: 'http_bad_request_line' };
    line += String.fromCharCode(c);
  }
  const sp = line.indexOf(' ');
  const method = sp < 0 ? line : line.slice(0, sp);
  if (!(sp < 0 ? /^[A-Z]{0,16}$/ : METHOD_RE).test(method)) return { kind: 'other', why: 'http_bad_method' };
  if (firstLineEnd < 0) return line.length >= 8192 ? { kind: 'other', why: 'http_line_too_long' } : { kind: 'more' };
  const parts = line.split(' ');
  if (parts.length !== 3 || !/^HTTP\/1\.[01]$/.test(parts[2]!)) return { kind: 'other', why: 'http_bad_request_line' };
  if (end < 0) return { kind: 'more' };
  let head = '';
  for (let i = 0; i < end; i++) head += String.fromCharCode(buf[i]!);
  const lines = head.split('\n').map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
  let host: string | null = null;
  let hosts = 0;
  for (const l of lines.slice(1)) {
    const colon = l.indexOf(':');
    if (colon <= 0) continue;
    if (l.slice(0, colon).toLowerCase() !== 'host') continue;
    hosts++;
    host = hostOfAuthority(l.slice(colon + 1).trim());
  }
  let conflict = hosts > 1;
  const target = parts[1]!;
  const abs = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/([^/?#]*)/.exec(target);
  if (abs) {
    const authority = abs[1]!.replace(/^[^@]*@/, '');
    const fromTarget = hostOfAuthority(authority);
    if (hosts === 0) host = fromTarget;
    else if (fromTarget !== host) conflict = true;
  }
  return { kind: 'http', host, conflict };
}

/** "name", "name:port", "[v6]:port" -> the name (null for IP literals and invalid names). */
function hostOfAuthority(a: string): string | null {
  if (a.startsWith('[')) return null;
  const colon = a.lastIndexOf(':');
  const name = colon >= 0 ? a.slice(0, colon) : a;
  if (colon >= 0 && !/^\d{0,5}$/.test(a.slice(colon + 1))) return null;
  return normaliseHostname(name);
}

/**
 * Reads a paused socket until its first bytes name a destination (or `maxBytes`, `timeoutMs`, or the client's end
 * says they never will), then pauses it again. Returns every byte read, to be written upstream first.
 */
export function peekSocket(
  sock: import('node:net').Socket,
  maxBytes: number,
  timeoutMs: number,
): Promise<{ bytes: Buffer; result: PeekResult }> {
  return new Promise((done) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let finished = false;
    const finish = (result: PeekResult) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      sock.off('data', onData);
      sock.off('end', onEnd);
      sock.pause();
      done({ bytes: Buffer.concat(chunks, size), result });
    };
    const onData = (d: Buffer) => {
      chunks.push(d);
      size += d.length;
      const all = chunks.length === 1 ? d : Buffer.concat(chunks, size);
      const r = peekDestination(all);
      if (r.kind !== 'more') finish(r);
      else if (size >= maxBytes) finish({ kind: 'other', why: 'peek_limit' });
    };
    const onEnd = () => finish({ kind: 'other', why: 'client_closed' });
    const timer = setTimeout(() => finish({ kind: 'other', why: 'peek_timeout' }), timeoutMs);
    sock.on('data', onData);
    sock.on('end', onEnd);
    sock.resume();
  });
}
