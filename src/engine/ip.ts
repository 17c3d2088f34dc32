/**
 * IP addresses and CIDR networks, IPv4 and IPv6. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`)
 * is the IPv4 address it carries, both as a subject and in an entry, so `10.0.0.0/8` matches a
 * connection the kernel reports as `::ffff:10.1.2.3`, and `::ffff:10.0.0.0/104` is `10.0.0.0/8`.
 *
 * Parsing is strict and allocation-free: dotted quads without leading zeros (inet_aton would read
 * `010` as octal, so it is refused rather than guessed), RFC 4291 IPv6 text, an embedded IPv4
 * tail, no zone index in entries.
 *
 * The index keeps one hash map per prefix length present (at most 33 for IPv4, 129 for IPv6),
 * keyed by the masked address, and probes the lengths longest first: the cost depends on how
 * many distinct lengths the list uses, never on how many entries it has.
 */
import { IntTable } from './hash.js';
import { PortRules } from './port.js';

/** Address family of a parsed address. IPv4-mapped IPv6 parses as 4. */
export type Family = 4 | 6;

/** A parsed address: IPv4 in w[3] (w[0..2] = 0), IPv6 as four big-endian 32-bit words. */
export interface IpAddr {
  family: Family;
  w: Uint32Array;
}

/** Parses a dotted quad in `s[start, end)`; returns the address as an unsigned int, or -1. */
function parseV4(s: string, start: number, end: number): number {
  let parts = 0;
  let value = 0;
  let i = start;
  while (true) {
    const partStart = i;
    let v = 0;
    while (i < end) {
      const c = s.charCodeAt(i);
      if (c < 48 || c > 57) break;
      v = v * 10 + (c - 48);
      i++;
      if (i - partStart > 3) return -1;
    }
    const len = i - partStart;
    if (len === 0 || v > 255) return -1;
    if (len > 1 && s.charCodeAt(partStart) === 48) return -1; // leading zero: octal under inet_aton
    value = value * 256 + v;
    parts++;
    if (i === end) break;
    if (s.charCodeAt(i) !== 46 || parts === 4) return -1;
    i++;
  }
  return parts === 4 ? value : -1;
}

function hexVal(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

const groups = new Uint16Array(8);

/** Parses IPv6 text in `s[start, end)` into `groups`; returns false if it is not an address. */
function parseV6(s: string, start: number, end: number): boolean {
  let gi = 0;
  let dbl = -1;
  let i = start;
  if (i === end) return false;
  if (s.charCodeAt(i) === 58 /* : */) {
    if (i + 1 >= end || s.charCodeAt(i + 1) !== 58) return false;
    dbl = 0;
    i += 2;
  }
  while (i < end) {
    let j = i;
    let v = 0;
    while (j < end && j - i < 5) {
      const h = hexVal(s.charCodeAt(j));
      if (h < 0) break;
      v = v * 16 + h;
      j++;
    }
    if (j < end && s.charCodeAt(j) === 46) {
      // Embedded IPv4 tail (::ffff:1.2.3.4, 64:ff9b::1.2.3.4): two groups.
      if (gi > 6) return false;
      const v4 = parseV4(s, i, end);
      if (v4 < 0) return false;
      groups[gi++] = v4 >>> 16;
      groups[gi++] = v4 & 0xffff;
      i = end;
      break;
    }
    if (j === i || j - i > 4 || gi >= 8) return false;
    groups[gi++] = v;
    if (j === end) {
      i = j;
      break;
    }
    if (s.charCodeAt(j) !== 58) return false;
    if (j + 1 < end && s.charCodeAt(j + 1) === 58) {
      if (dbl >= 0) return false;
      dbl = gi;
      i = j + 2;
    } else {
      i = j + 1;
      if (i === end) return false; // trailing single ':'
    }
  }
  if (dbl < 0) return gi === 8;
  if (gi >= 8) return false; // '::' stands for at least one group
  const tail = gi - dbl;
  for (let k = 0; k < tail; k++) groups[7 - k] = groups[gi - 1 - k]!;
  for (let k = dbl; k < 8 - tail; k++) groups[k] = 0;
  return true;
}

/**
 * Parses `s[start, end)` as an IPv4 or IPv6 address into `out` (4 words). IPv4-mapped IPv6 is
 * folded to IPv4 unless `keepMapped` (entries need the raw form to rescale their prefix).
 * Returns the family, or 0 if the text is not an address.
 */
export function parseIpInto(s: string, start: number, end: number, out: Uint32Array, keepMapped = false): 0 | Family {
  let colon = false;
  for (let i = start; i < end; i++) {
    if (s.charCodeAt(i) === 58) {
      colon = true;
      break;
    }
  }
  if (!colon) {
    const v4 = parseV4(s, start, end);
    if (v4 < 0) return 0;
    out[0] = 0;
    out[1] = 0;
    out[2] = 0;
    out[3] = v4;
    return 4;
  }
  if (!parseV6(s, start, end)) return 0;
  for (let k = 0; k < 4; k++) out[k] = ((groups[2 * k]! << 16) | groups[2 * k + 1]!) >>> 0;
  if (!keepMapped && isMapped(out)) {
    out[2] = 0;
    return 4;
  }
  return 6;
}

/** True for ::ffff:0:0/96 (an IPv4-mapped IPv6 address). */
export function isMapped(w: Uint32Array): boolean {
  return w[0] === 0 && w[1] === 0 && w[2] === 0xffff;
}

/** Parses a whole string as an address (no zone index). Allocates the result: for entries and tests. */
export function parseIp(s: string): IpAddr | null {
  const w = new Uint32Array(4);
  const family = parseIpInto(s, 0, s.length, w);
  return family === 0 ? null : { family, w };
}

/** Mask of the `bits` leading bits of a 32-bit word (0..32). */
function wordMask(bits: number): number {
  if (bits <= 0) return 0;
  if (bits >= 32) return 0xffffffff;
  return (0xffffffff << (32 - bits)) >>> 0;
}

/** MASKS[len * 4 + k]: the mask of word k for prefix length len (0..128), computed once. */
const MASKS = new Uint32Array(129 * 4);
for (let len = 0; len <= 128; len++) for (let k = 0; k < 4; k++) MASKS[len * 4 + k] = wordMask(len - 32 * k);

/** Masked word k of a 128-bit value for a prefix length. */
function maskedWord(w: Uint32Array, k: number, len: number): number {
  return (w[k]! & MASKS[len * 4 + k]!) >>> 0;
}

/** True when `w` has no bits set beyond the prefix length `len` (a canonical network address). */
export function hostBitsClear(w: Uint32Array, family: Family, len: number): boolean {
  if (family === 4) return (w[3]! & wordMask(len)) >>> 0 === w[3];
  for (let k = 0; k < 4; k++) if (maskedWord(w, k, len) !== w[k]) return false;
  return true;
}

/** Hash of the four masked words (for the IPv6 maps). */
function v6Key(m0: number, m1: number, m2: number, m3: number, len: number): number {
  let h = Math.imul(m0 ^ len, 0x9e3779b1);
  h = Math.imul(h ^ m1, 0x85ebca77);
  h = Math.imul(h ^ m2, 0xc2b2ae3d);
  h = Math.imul(h ^ m3, 0x27d4eb2f);
  return h ^ (h >>> 15);
}

interface V6Bucket {
  m0: number;
  m1: number;
  m2: number;
  m3: number;
  rules: PortRules;
  next: V6Bucket | null;
}

/** Map key of an IPv4 network: the prefix bits only, as an int32 (a small integer in V8). */
function v4Key(addr: number, len: number): number {
  return len === 0 ? 0 : (addr >>> (32 - len)) | 0;
}

/** A compiled set of IP/CIDR entries (one surface list). Build once, query many times. */
export class IpIndex {
  private readonly v4: (IntTable<PortRules> | undefined)[] = new Array<IntTable<PortRules> | undefined>(33);
  private readonly v6: (IntTable<V6Bucket> | undefined)[] = new Array<IntTable<V6Bucket> | undefined>(129);
  private v4Lens: number[] = [];
  private v6Lens: number[] = [];
  size = 0;

  /** Adds a network (host bits already clear; IPv4 in w[3]) optionally pinned to a port. */
  add(family: Family, w: Uint32Array, len: number, port: number | null, rule: string): void {
    this.size++;
    if (family === 4) {
      let m = this.v4[len];
      if (m === undefined) {
        m = this.v4[len] = new IntTable();
        this.v4Lens = insertDesc(this.v4Lens, len);
      }
      const key = v4Key(w[3]!, len);
      let rules = m.get(key);
      if (rules === undefined) m.set(key, (rules = new PortRules()));
      rules.add(rule, port);
      return;
    }
    let m = this.v6[len];
    if (m === undefined) {
      m = this.v6[len] = new IntTable();
      this.v6Lens = insertDesc(this.v6Lens, len);
    }
    const m0 = maskedWord(w, 0, len);
    const m1 = maskedWord(w, 1, len);
    const m2 = maskedWord(w, 2, len);
    const m3 = maskedWord(w, 3, len);
    const key = v6Key(m0, m1, m2, m3, len);
    let b = m.get(key) ?? null;
    while (b !== null && !(b.m0 === m0 && b.m1 === m1 && b.m2 === m2 && b.m3 === m3)) b = b.next;
    if (b === null) {
      b = { m0, m1, m2, m3, rules: new PortRules(), next: m.get(key) ?? null };
      m.set(key, b);
    }
    b.rules.add(rule, port);
  }

  /** As match(), for an address already parsed into words (IPv4 in w[3]). */
  matchParsed(family: Family, w: Uint32Array, port: number): string | null {
    if (family === 4) {
      const addr = w[3]!;
      const lens = this.v4Lens;
      for (let i = 0; i < lens.length; i++) {
        const len = lens[i]!;
        const rules = this.v4[len]!.get(v4Key(addr, len));
        if (rules !== undefined) {
          const r = rules.match(port);
          if (r !== null) return r;
        }
      }
      return null;
    }
    const lens = this.v6Lens;
    for (let i = 0; i < lens.length; i++) {
      const len = lens[i]!;
      const m0 = maskedWord(w, 0, len);
      const m1 = maskedWord(w, 1, len);
      const m2 = maskedWord(w, 2, len);
      const m3 = maskedWord(w, 3, len);
      let b = this.v6[len]!.get(v6Key(m0, m1, m2, m3, len)) ?? null;
      while (b !== null) {
        if (b.m0 === m0 && b.m1 === m1 && b.m2 === m2 && b.m3 === m3) {
          const r = b.rules.match(port);
          if (r !== null) return r;
          break;
        }
        b = b.next;
      }
    }
    return null;
  }
}

function insertDesc(lens: number[], len: number): number[] {
  return [...lens, len].sort((a, b) => b - a);
}
