/**
 * Generated and mutated DNS messages for the forwarder's fuzz (tests/unit/network-dns-fuzz.test.ts with a small
 * count, bench/dns-fuzz.ts with a million). The property: parseQuery never throws, and whatever it accepts is a
 * question whose own bytes re-encode identically, and the query the forwarder would send upstream parses back to
 * that same question. Seeded, so a failure reproduces from its seed and index.
 */
import { encodeQuery, encodeQuestion, parseQuery } from '../dataplane/network/dns/wire.js';
import { mulberry32 } from './prng.js';

const ALPHA = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_';
const TYPES = [1, 28, 5, 12, 15, 16, 33, 65, 255, 252, 251, 41, 0, 6, 2, 99, 257, 65535];

function label(rnd: () => number): string {
  const len = 1 + Math.floor(rnd() * (rnd() < 0.05 ? 63 : 12));
  let s = '';
  for (let i = 0; i < len; i++) s += ALPHA[Math.floor(rnd() * ALPHA.length)];
  return s;
}

/** A valid-looking query (sometimes with EDNS and options, sometimes with odd flags). */
export function generateQuery(rnd: () => number): Buffer {
  const labels: string[] = [];
  const n = 1 + Math.floor(rnd() * 5);
  for (let i = 0; i < n; i++) labels.push(label(rnd));
  const name = Buffer.concat([
    ...labels.map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')])),
    Buffer.from([0]),
  ]);
  const hdr = Buffer.alloc(12);
  hdr.writeUInt16BE(Math.floor(rnd() * 65536), 0);
  let flags = rnd() < 0.9 ? 0x0100 : Math.floor(rnd() * 65536);
  if (rnd() < 0.1) flags |= 0x0010;
  hdr.writeUInt16BE(flags, 2);
  hdr.writeUInt16BE(rnd() < 0.95 ? 1 : Math.floor(rnd() * 3), 4);
  const edns = rnd() < 0.5;
  hdr.writeUInt16BE(edns ? 1 : 0, 10);
  const tail = Buffer.alloc(4);
  tail.writeUInt16BE(TYPES[Math.floor(rnd() * TYPES.length)]!, 0);
  tail.writeUInt16BE(rnd() < 0.95 ? 1 : Math.floor(rnd() * 300), 2);
  const parts = [hdr, name, tail];
  if (edns) {
    const opts: Buffer[] = [];
    const k = Math.floor(rnd() * 3);
    for (let i = 0; i < k; i++) {
      const len = Math.floor(rnd() * 12);
      const o = Buffer.alloc(4 + len);
      o.writeUInt16BE(Math.floor(rnd() * 20), 0);
      o.writeUInt16BE(len, 2);
      for (let j = 0; j < len; j++) o[4 + j] = Math.floor(rnd() * 256);
      opts.push(o);
    }
    const body = Buffer.concat(opts);
    const opt = Buffer.alloc(11);
    opt.writeUInt16BE(41, 1);
    opt.writeUInt16BE(rnd() < 0.5 ? 1232 : Math.floor(rnd() * 65536), 3);
    opt.writeUInt16BE(rnd() < 0.5 ? 0 : 0x8000, 7);
    opt.writeUInt16BE(body.length, 9);
    parts.push(opt, body);
  }
  return Buffer.concat(parts);
}

/** One mutation of `m`: bit flips, byte overwrites, truncation, extension, a count or a length byte changed. */
export function mutate(m: Buffer, rnd: () => number): Buffer {
  const out = Buffer.from(m);
  const k = Math.floor(rnd() * 8);
  switch (k) {
    case 0:
      if (out.length) out[Math.floor(rnd() * out.length)]! ^= 1 << Math.floor(rnd() * 8);
      return out;
    case 1:
      if (out.length) out[Math.floor(rnd() * out.length)] = Math.floor(rnd() * 256);
      return out;
    case 2:
      return out.subarray(0, Math.floor(rnd() * out.length));
    case 3: {
      const extra = Buffer.alloc(1 + Math.floor(rnd() * 16));
      for (let i = 0; i < extra.length; i++) extra[i] = Math.floor(rnd() * 256);
      return Buffer.concat([out, extra]);
    }
    case 4:
      if (out.length >= 12) out.writeUInt16BE(Math.floor(rnd() * 4), 4 + 2 * Math.floor(rnd() * 4));
      return out;
    case 5:
      // a label length byte: a compression pointer, a too-long label, zero
      if (out.length > 12) out[12] = [0xc0, 0x3f, 0x40, 0, 0xff][Math.floor(rnd() * 5)]!;
      return out;
    case 6: {
      const at = Math.floor(rnd() * (out.length + 1));
      const ins = Buffer.alloc(1 + Math.floor(rnd() * 4));
      for (let i = 0; i < ins.length; i++) ins[i] = Math.floor(rnd() * 256);
      return Buffer.concat([out.subarray(0, at), ins, out.subarray(at)]);
    }
    default: {
      const r = Buffer.alloc(Math.floor(rnd() * 64));
      for (let i = 0; i < r.length; i++) r[i] = Math.floor(rnd() * 256);
      return r;
    }
  }
}

export interface FuzzStats {
  messages: number;
  accepted: number;
  refused: number;
  /** Messages that broke the property (should be zero): seed index and what went wrong. */
  violations: { index: number; why: string; hex: string }[];
}

/** The i-th message of a run: a fresh query, or one to a few mutations of one. */
export function fuzzMessage(rnd: () => number): Buffer {
  let m = generateQuery(rnd);
  if (rnd() < 0.75) {
    const n = 1 + Math.floor(rnd() * 3);
    for (let i = 0; i < n; i++) m = mutate(m, rnd);
  }
  return m;
}

/** Checks the property on one message; returns why it failed, or null. */
export function checkMessage(m: Buffer): string | null {
  let r;
  try {
    r = parseQuery(m);
  } catch (e) {
    return `parseQuery threw: ${(e as Error).message}`;
  }
  if (!r.ok) return null;
  const q = r.query;
  const qbytes = encodeQuestion(q.question);
  if (!m.subarray(12, 12 + qbytes.length).equals(qbytes)) return 'accepted question does not re-encode to its bytes';
  const sent = encodeQuery(0x4242, q);
  const back = parseQuery(sent);
  if (!back.ok) return `the forwarded query does not parse: ${back.why}`;
  const b = back.query.question;
  if (b.name !== q.question.name || b.qtype !== q.question.qtype || b.qclass !== q.question.qclass)
    return 'the forwarded query asks another question';
  return null;
}

export function runFuzz(seed: number, count: number): FuzzStats {
  const rnd = mulberry32(seed);
  const stats: FuzzStats = { messages: 0, accepted: 0, refused: 0, violations: [] };
  for (let i = 0; i < count; i++) {
    const m = fuzzMessage(rnd);
    stats.messages++;
    const why = checkMessage(m);
    if (why) {
      if (stats.violations.length < 20) stats.violations.push({ index: i, why, hex: m.toString('hex') });
      continue;
    }
    if (parseQuery(m).ok) stats.accepted++;
    else stats.refused++;
  }
  return stats;
}
