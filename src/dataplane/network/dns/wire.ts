/**
 * DNS messages, strictly (RFC 1035, EDNS0 of RFC 6891): a parser of exactly one kind of query, the encoder of the
 * query the forwarder sends upstream, and a reader of the upstream's answer. Written here rather than taken from
 * dns-packet because the forwarder needs refusal, not tolerance: dns-packet decodes whatever it can (trailing bytes,
 * compressed questions, any label bytes, several questions) and re-encodes something else, while a security
 * boundary must forward only a question it understood completely and re-built itself.
 *
 * A query is accepted when: 12-byte header with QR=0, opcode QUERY, TC=0, Z=0, one question, no answer or
 * authority records, at most one additional record which must be an EDNS0 OPT at the root (version 0); the
 * question name is uncompressed, 1-63 bytes a label, at most 255 bytes in all, letters, digits, `-` and `_`; class
 * IN; a type that is not a zone transfer or meta-query; nothing after the last record. Anything else is refused.
 */

export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;

/** The biggest query accepted (a question is at most 4 + 255 bytes, an OPT with options is small). */
export const MAX_QUERY = 512;

const TYPE_NAMES: Record<number, string> = {
  1: 'A',
  2: 'NS',
  5: 'CNAME',
  6: 'SOA',
  12: 'PTR',
  15: 'MX',
  16: 'TXT',
  28: 'AAAA',
  33: 'SRV',
  35: 'NAPTR',
  43: 'DS',
  48: 'DNSKEY',
  64: 'SVCB',
  65: 'HTTPS',
  99: 'SPF',
  257: 'CAA',
};
/** Types never forwarded: OPT as a question, zone transfers, MAILB/MAILA. ANY (255) is forwarded. */
const UNSUPPORTED_TYPES = new Set([0, 41, 251, 252, 253, 254]);

export function typeName(t: number): string {
  return TYPE_NAMES[t] ?? `TYPE${t}`;
}

export interface Question {
  /** The name as sent (case kept; no trailing dot; '' is the root). */
  name: string;
  qtype: number;
  qclass: number;
}

export interface Query {
  id: number;
  /** Recursion desired. */
  rd: boolean;
  /** Checking disabled (DNSSEC). */
  cd: boolean;
  question: Question;
  /** EDNS0: the client's UDP payload size and DO bit, or null without an OPT record. */
  edns: { udpSize: number; dnssecOk: boolean } | null;
}

export type ParseResult =
  | { ok: true; query: Query }
  /** `id` is set when the header could be read (so an error answer can be sent); null = drop silently. */
  | { ok: false; rcode: number; id: number | null; why: string };

function fail(rcode: number, id: number | null, why: string): ParseResult {
  return { ok: false, rcode, id, why };
}

function labelByteOk(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x5f;
}

/** Reads an uncompressed name at `off`; returns the name and the offset after it, or the reason. */
function readPlainName(msg: Buffer, off: number): { name: string; next: number } | string {
  const labels: string[] = [];
  let p = off;
  let wire = 0;
  for (;;) {
    if (p >= msg.length) return 'name runs past the end';
    const len = msg[p]!;
    if (len === 0) {
      wire += 1;
      if (wire > 255) return 'name longer than 255 bytes';
      return { name: labels.join('.'), next: p + 1 };
    }
    if (len & 0xc0) return 'compressed or extended label in the question';
    if (p + 1 + len > msg.length) return 'label runs past the end';
    for (let i = p + 1; i <= p + len; i++)
      if (!labelByteOk(msg[i]!)) return 'label byte outside letters, digits, - and _';
    labels.push(msg.toString('latin1', p + 1, p + 1 + len));
    wire += 1 + len;
    if (wire > 255) return 'name longer than 255 bytes';
    p += 1 + len;
  }
}

/** Parses one query strictly (see the module comment). Never throws. */
export function parseQuery(msg: Buffer): ParseResult {
  if (msg.length < 12) return fail(RCODE.FORMERR, null, 'shorter than a header');
  const id = msg.readUInt16BE(0);
  if (msg.length > MAX_QUERY) return fail(RCODE.FORMERR, id, 'query longer than 512 bytes');
  const flags = msg.readUInt16BE(2);
  if (flags & 0x8000) return fail(RCODE.FORMERR, null, 'a response, not a query'); // never answer a response
  const opcode = (flags >> 11) & 0xf;
  if (opcode !== 0) return fail(RCODE.NOTIMP, id, `opcode ${opcode}`);
  if (flags & 0x0200) return fail(RCODE.FORMERR, id, 'truncated query');
  if (flags & 0x0040) return fail(RCODE.FORMERR, id, 'Z bit set');
  if (flags & 0x000f) return fail(RCODE.FORMERR, id, 'rcode set in a query');
  const qd = msg.readUInt16BE(4);
  const an = msg.readUInt16BE(6);
  const ns = msg.readUInt16BE(8);
  const ar = msg.readUInt16BE(10);
  if (qd !== 1) return fail(RCODE.FORMERR, id, `${qd} questions`);
  if (an !== 0 || ns !== 0) return fail(RCODE.FORMERR, id, 'answer or authority records in a query');
  if (ar > 1) return fail(RCODE.FORMERR, id, `${ar} additional records`);
  const n = readPlainName(msg, 12);
  if (typeof n === 'string') return fail(RCODE.FORMERR, id, n);
  if (n.next + 4 > msg.length) return fail(RCODE.FORMERR, id, 'question runs past the end');
  const qtype = msg.readUInt16BE(n.next);
  const qclass = msg.readUInt16BE(n.next + 2);
  let p = n.next + 4;
  let edns: Query['edns'] = null;
  if (ar === 1) {
    // EDNS0 OPT: root name, type 41, class = UDP size, ttl = ext-rcode|version|DO|Z, rdlen, options.
    if (p + 11 > msg.length) return fail(RCODE.FORMERR, id, 'additional record runs past the end');
    if (msg[p] !== 0) return fail(RCODE.FORMERR, id, 'additional record is not an OPT at the root');
    if (msg.readUInt16BE(p + 1) !== 41) return fail(RCODE.FORMERR, id, 'additional record is not an OPT');
    const udpSize = msg.readUInt16BE(p + 3);
    const extRcode = msg[p + 5]!;
    const version = msg[p + 6]!;
    const doZ = msg.readUInt16BE(p + 7);
    const rdlen = msg.readUInt16BE(p + 9);
    if (extRcode !== 0) return fail(RCODE.FORMERR, id, 'extended rcode set in a query');
    if (version !== 0) return fail(RCODE.FORMERR, id, `EDNS version ${version}`);
    if (doZ & 0x7fff) return fail(RCODE.FORMERR, id, 'EDNS Z bits set');
    p += 11;
    if (p + rdlen !== msg.length) return fail(RCODE.FORMERR, id, 'OPT data does not end the message');
    // Options are well-formed code/length pairs; none is forwarded (no client subnet, no cookie leaves here).
    let q = p;
    while (q < p + rdlen) {
      if (q + 4 > p + rdlen) return fail(RCODE.FORMERR, id, 'EDNS option runs past the end');
      q += 4 + msg.readUInt16BE(q + 2);
    }
    if (q !== p + rdlen) return fail(RCODE.FORMERR, id, 'EDNS option runs past the end');
    p += rdlen;
    edns = { udpSize: Math.max(512, udpSize), dnssecOk: (doZ & 0x8000) !== 0 };
  }
  if (p !== msg.length) return fail(RCODE.FORMERR, id, 'bytes after the last record');
  if (n.name === '') return fail(RCODE.REFUSED, id, 'query for the root');
  if (qclass !== 1) return fail(RCODE.NOTIMP, id, `class ${qclass}`);
  if (UNSUPPORTED_TYPES.has(qtype)) return fail(RCODE.NOTIMP, id, `type ${typeName(qtype)}`);
  return {
    ok: true,
    query: {
      id,
      rd: (flags & 0x0100) !== 0,
      cd: (flags & 0x0010) !== 0,
      question: { name: n.name, qtype, qclass },
      edns,
    },
  };
}

/** Writes `name` in wire form at `p` of `out` (which has room); returns the offset after it. */
function writeName(out: Buffer, p: number, name: string): number {
  if (name !== '') {
    let start = 0;
    for (;;) {
      const dot = name.indexOf('.', start);
      const end = dot < 0 ? name.length : dot;
      out[p++] = end - start;
      p += out.write(name.slice(start, end), p, 'latin1');
      if (dot < 0) break;
      start = dot + 1;
    }
  }
  out[p++] = 0;
  return p;
}

/** The wire length of `name` (one length byte per label, the bytes, the root). */
function nameLength(name: string): number {
  return name === '' ? 1 : name.length + 2;
}

function writeQuestion(out: Buffer, p: number, q: Question): number {
  p = writeName(out, p, q.name);
  out.writeUInt16BE(q.qtype, p);
  out.writeUInt16BE(q.qclass, p + 2);
  return p + 4;
}

/** The question section's bytes. */
export function encodeQuestion(q: Question): Buffer {
  const out = Buffer.alloc(nameLength(q.name) + 4);
  writeQuestion(out, 0, q);
  return out;
}

/** The forwarder's own query for `q` (a new id, RD, CD as the client asked, an OPT of 1232 bytes when it had EDNS). */
export function encodeQuery(id: number, q: Query): Buffer {
  const out = Buffer.alloc(12 + nameLength(q.question.name) + 4 + (q.edns ? 11 : 0));
  out.writeUInt16BE(id, 0);
  out.writeUInt16BE((q.rd ? 0x0100 : 0) | (q.cd ? 0x0010 : 0), 2);
  out.writeUInt16BE(1, 4);
  out.writeUInt16BE(q.edns ? 1 : 0, 10);
  const p = writeQuestion(out, 12, q.question);
  if (q.edns) {
    out.writeUInt16BE(41, p + 1);
    out.writeUInt16BE(1232, p + 3);
    out.writeUInt16BE(q.edns.dnssecOk ? 0x8000 : 0, p + 7);
  }
  return out;
}

/** A reply carrying only the header and (when known) the question: REFUSED, NXDOMAIN, FORMERR, SERVFAIL, or TC. */
export function encodeError(
  id: number,
  rcode: number,
  q: Query | null,
  opts: { truncated?: boolean; ra?: boolean } = {},
): Buffer {
  const hdr = Buffer.alloc(12);
  hdr.writeUInt16BE(id, 0);
  const rd = q?.rd ? 0x0100 : 0;
  const cd = q?.cd ? 0x0010 : 0;
  hdr.writeUInt16BE(
    0x8000 | rd | cd | (opts.ra === false ? 0 : 0x0080) | (opts.truncated ? 0x0200 : 0) | (rcode & 0xf),
    2,
  );
  if (!q) return hdr;
  const out = Buffer.alloc(12 + nameLength(q.question.name) + 4);
  hdr.copy(out, 0);
  out.writeUInt16BE(1, 4);
  writeQuestion(out, 12, q.question);
  return out;
}

/** A name anywhere in a message (compression allowed, loops refused): its length on the wire at `off`. */
function skipName(msg: Buffer, off: number): number | null {
  let p = off;
  for (let guard = 0; guard < 128; guard++) {
    if (p >= msg.length) return null;
    const len = msg[p]!;
    if (len === 0) return p + 1;
    if ((len & 0xc0) === 0xc0) return p + 2 <= msg.length ? p + 2 : null;
    if (len & 0xc0) return null;
    p += 1 + len;
  }
  return null;
}

export interface Answer {
  id: number;
  rcode: number;
  truncated: boolean;
  /** Addresses of the A and AAAA records of the answer section, with their TTL (seconds). */
  addresses: { address: string; ttl: number }[];
}

function ipv6Text(b: Buffer): string {
  const words: string[] = [];
  for (let i = 0; i < 16; i += 2) words.push(b.readUInt16BE(i).toString(16));
  // The WHATWG URL parser prints the canonical (RFC 5952) form, as inet_ntop does for SO_ORIGINAL_DST.
  return new URL(`http://[${words.join(':')}]/`).hostname.slice(1, -1);
}

/**
 * Reads an upstream answer to `q` (sent with `id`): a response to exactly that question (name compared without
 * case), every record inside the message. Null when it is anything else: the forwarder then answers SERVFAIL.
 */
export function readAnswer(msg: Buffer, id: number, q: Question): Answer | null {
  if (msg.length < 12 || msg.readUInt16BE(0) !== id) return null;
  const flags = msg.readUInt16BE(2);
  if (!(flags & 0x8000) || ((flags >> 11) & 0xf) !== 0) return null;
  if (msg.readUInt16BE(4) !== 1) return null;
  const n = readPlainName(msg, 12);
  if (typeof n === 'string' || n.next + 4 > msg.length) return null;
  if (n.name.toLowerCase() !== q.name.toLowerCase()) return null;
  if (msg.readUInt16BE(n.next) !== q.qtype || msg.readUInt16BE(n.next + 2) !== q.qclass) return null;
  const counts = [msg.readUInt16BE(6), msg.readUInt16BE(8), msg.readUInt16BE(10)];
  const truncated = (flags & 0x0200) !== 0;
  const addresses: Answer['addresses'] = [];
  let p = n.next + 4;
  for (let section = 0; section < 3; section++) {
    for (let i = 0; i < counts[section]!; i++) {
      const after = skipName(msg, p);
      if (after === null || after + 10 > msg.length)
        return truncated ? { id, rcode: flags & 0xf, truncated, addresses } : null;
      const type = msg.readUInt16BE(after);
      const cls = msg.readUInt16BE(after + 2);
      const ttl = msg.readUInt32BE(after + 4);
      const rdlen = msg.readUInt16BE(after + 8);
      const rd = after + 10;
      if (rd + rdlen > msg.length) return truncated ? { id, rcode: flags & 0xf, truncated, addresses } : null;
      if (section === 0 && cls === 1) {
        if (type === 1 && rdlen === 4) addresses.push({ address: [...msg.subarray(rd, rd + 4)].join('.'), ttl });
        else if (type === 28 && rdlen === 16) addresses.push({ address: ipv6Text(msg.subarray(rd, rd + 16)), ttl });
      }
      p = rd + rdlen;
    }
  }
  if (p !== msg.length && !truncated) return null;
  return { id, rcode: flags & 0xf, truncated, addresses };
}

/** The upstream answer re-addressed to the client: its id and the client's own spelling of the question. */
export function readdress(msg: Buffer, clientId: number, q: Question, inPlace = false): Buffer {
  const out = inPlace ? msg : Buffer.from(msg);
  out.writeUInt16BE(clientId, 0);
  // The question's bytes have the same length in any case spelling: put back the client's (0x20 randomisation).
  writeQuestion(out, 12, q);
  return out;
}

/** The header-and-question reply telling a UDP client to retry over TCP (the answer does not fit its size). */
export function truncatedReply(msg: Buffer, clientId: number, q: Query): Buffer {
  const flags = msg.readUInt16BE(2);
  const out = encodeError(clientId, flags & 0xf, q, { truncated: true });
  out.writeUInt16BE((flags & 0x87ff) | 0x0200, 2);
  return out;
}
