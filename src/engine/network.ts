/**
 * Network entries and the network surface's index.
 *
 * Grammar (anything else is inert, see networkEntryProblem):
 *   host            github.com, *.github.com, localhost       (label suffix; `*.` = subdomains only)
 *   host:port       github.com:443, *.github.com:8443
 *   IPv4            10.1.2.3            IPv4:port      10.1.2.3:443
 *   IPv4 CIDR       10.0.0.0/8          IPv4 CIDR:port 10.0.0.0/8:443
 *   IPv6            2001:db8::1         [IPv6]:port    [2001:db8::1]:443
 *   IPv6 CIDR       2001:db8::/32       [CIDR]:port    [2001:db8::/32]:443
 * A bare IPv6 address takes no port (its colons make `addr:port` ambiguous): bracket it.
 * A CIDR must be a network address (no host bits set, as nft requires).
 *
 * A domain entry matches the subject's domain; an IP/CIDR entry matches the subject's IP (and a
 * domain that is an IP literal, e.g. `Host: 10.1.2.3`). An entry without a port matches any port.
 */
import { DomainIndex, domainHostProblem, normalizeDomainSubject } from './domain.js';
import { type Family, IpIndex, hostBitsClear, isMapped, parseIpInto } from './ip.js';
import { parsePort } from './port.js';
import type { EntryProblem, NetworkSubject } from './types.js';

/** A parsed network entry. */
export type NetworkEntry =
  | { kind: 'domain'; domain: string; wildcard: boolean; port: number | null }
  | { kind: 'ip'; family: Family; w: Uint32Array; len: number; port: number | null; coversAllV4: boolean };

const WHITESPACE_OR_CONTROL = /[\s\u0000-\u001f\u007f]/;
const NON_ASCII = /[^\u0000-\u007f]/;

function problem(code: EntryProblem['code'], message: string): { problem: EntryProblem } {
  return { problem: { code, message } };
}

/** Parses an address with an optional `/len` into an IP entry, or returns the problem. */
function parseAddrPrefix(text: string, port: number | null): NetworkEntry | { problem: EntryProblem } {
  const slash = text.indexOf('/');
  const addrEnd = slash < 0 ? text.length : slash;
  const w = new Uint32Array(4);
  const raw = parseIpInto(text, 0, addrEnd, w, true);
  if (raw === 0) return problem('bad_ip', `"${text.slice(0, addrEnd)}" is not an IP address`);
  const max = raw === 4 ? 32 : 128;
  let len = max;
  if (slash >= 0) {
    const lenText = text.slice(slash + 1);
    if (!/^(?:0|[1-9][0-9]{0,2})$/.test(lenText) || Number(lenText) > max) {
      return problem('bad_cidr', `"/${lenText}" is not a prefix length (0-${max})`);
    }
    len = Number(lenText);
  }
  if (!hostBitsClear(w, raw, len)) {
    return problem('bad_cidr', `"${text}" has host bits set; write the network address`);
  }
  let family: Family = raw;
  let coversAllV4 = false;
  if (raw === 6 && isMapped(w) && len >= 96) {
    // ::ffff:10.0.0.0/104 is 10.0.0.0/8: mapped addresses are IPv4.
    family = 4;
    w[2] = 0;
    len -= 96;
  } else if (raw === 6 && len < 96) {
    // A wider IPv6 network (::/0, ::/64) contains the mapped range, so it covers all of IPv4.
    const mappedPrefix = new Uint32Array([0, 0, 0xffff, 0]);
    coversAllV4 = hostBitsClearAgainst(w, mappedPrefix, len);
  }
  return { kind: 'ip', family, w, len, port, coversAllV4 };
}

/** True when `net/len` contains `addr`. */
function hostBitsClearAgainst(net: Uint32Array, addr: Uint32Array, len: number): boolean {
  for (let k = 0; k < 4; k++) {
    const bits = len - 32 * k;
    if (bits <= 0) break;
    const mask = bits >= 32 ? 0xffffffff : (0xffffffff << (32 - bits)) >>> 0;
    if ((net[k]! & mask) >>> 0 !== (addr[k]! & mask) >>> 0) return false;
  }
  return true;
}

/** A host of 1-4 parts, each decimal, octal or 0x-hex, at least one of them hex. */
const INET_ATON_HEX = /^(?=.*0x)(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}$/i;

/**
 * An entry's port is written as the port number: decimal 1-65535 without leading zeros, so
 * `:00443` is refused rather than read as 443 (an address with leading zeros is refused likewise).
 */
function entryPortProblem(text: string): EntryProblem | null {
  if (parsePort(text) === null) return { code: 'bad_port', message: `"${text}" is not a port (1-65535)` };
  if (text.length > 1 && text.charCodeAt(0) === 48)
    return { code: 'bad_port', message: `"${text}" has leading zeros; write the port as ${parsePort(text)}` };
  return null;
}

/** Parses one network entry. Returns the entry, or `{problem}` when it can never match. */
export function parseNetworkEntry(entry: unknown): NetworkEntry | { problem: EntryProblem } {
  if (typeof entry !== 'string') return problem('not_a_string', 'an entry must be a string');
  if (entry.length === 0) return problem('empty', 'the entry is empty');
  if (WHITESPACE_OR_CONTROL.test(entry))
    return problem('whitespace', 'an entry contains whitespace or a control character');
  if (NON_ASCII.test(entry)) {
    return problem('non_ascii', 'non-ASCII names never match; write an IDN as its xn-- form');
  }
  if (entry.includes('://')) return problem('url', 'an entry is a host, IP or CIDR, never a URL; write just the host');
  if (entry.includes('@')) return problem('userinfo', '"user@host" never matches; write just the host');

  if (entry.charCodeAt(0) === 91 /* [ */) {
    const close = entry.indexOf(']');
    if (close < 0) return problem('bad_ip', 'an unclosed "["');
    const rest = entry.slice(close + 1);
    let port: number | null = null;
    if (rest.length > 0) {
      if (rest.charCodeAt(0) !== 58) return problem('bad_port', `unexpected "${rest}" after "]"; write [addr]:port`);
      const pp = entryPortProblem(rest.slice(1));
      if (pp !== null) return { problem: pp };
      port = parsePort(rest.slice(1));
    }
    return parseAddrPrefix(entry.slice(1, close), port);
  }

  const firstColon = entry.indexOf(':');
  if (firstColon >= 0 && entry.indexOf(':', firstColon + 1) >= 0) {
    // Two or more colons: a bare IPv6 address or network, which cannot carry a port.
    if (entry.includes(']')) return problem('bad_ip', 'an unopened "]"');
    return parseAddrPrefix(entry, null);
  }

  let host = entry;
  let port: number | null = null;
  if (firstColon >= 0) {
    host = entry.slice(0, firstColon);
    const portText = entry.slice(firstColon + 1);
    const pp = entryPortProblem(portText);
    if (pp !== null) return { problem: pp };
    port = parsePort(portText);
  }
  if (host.length === 0) return problem('empty', 'the host is empty');

  const slash = host.indexOf('/');
  if (slash >= 0) {
    if (/^[0-9.]+$/.test(host.slice(0, slash))) return parseAddrPrefix(host, port);
    return problem('host_path', '"host/path" never matches: the network surface sees hosts, not paths');
  }
  if (/^[0-9.]+$/.test(host)) return parseAddrPrefix(host, port);

  // inet_aton's other spellings of an IPv4 address (0x7f.0.0.1, 0177.1, 2130706433 is caught above):
  // a resolver reads them as an address, the engine would read a host name nobody connects by.
  if (INET_ATON_HEX.test(host)) {
    return problem(
      'bad_ip',
      `"${host}" is an IPv4 address in hex or short form; write it dotted-decimal (e.g. 127.0.0.1)`,
    );
  }
  const p = domainHostProblem(host);
  if (p !== null) return { problem: p };
  const wildcard = host.startsWith('*.');
  const domain = normalizeDomainSubject(wildcard ? host.slice(2) : host)!;
  return { kind: 'domain', domain, wildcard, port };
}

/**
 * Returns why a network entry can never match, or null when it is well-formed.
 * Used to refuse entries on write and to report them on load.
 */
export function networkEntryProblem(entry: unknown): EntryProblem | null {
  const r = parseNetworkEntry(entry);
  return 'problem' in r ? r.problem : null;
}

/**
 * A network subject parsed once per decision and shared by the deny and allow lookups.
 * Reused between decisions (the engine is synchronous), so a decision allocates nothing.
 */
export interface PreparedNetwork {
  /** Normalised domain, or null when there is none or it cannot match a domain entry. */
  name: string | null;
  /** Family of a domain that is an address literal, else 0. */
  literalFamily: 0 | Family;
  literal: Uint32Array;
  /** Family of the subject's IP, else 0. */
  ipFamily: 0 | Family;
  ip: Uint32Array;
  port: number;
}

/** A fresh holder for prepareNetworkSubject. */
export function newPreparedNetwork(): PreparedNetwork {
  return { name: null, literalFamily: 0, literal: new Uint32Array(4), ipFamily: 0, ip: new Uint32Array(4), port: 0 };
}

/**
 * Parses a network subject into `out`. Throws when the subject is malformed (a port that is not
 * 0..65535, an `ip` that is not an address): a destination the enforcer failed to read must not
 * be judged as "no match", which in blacklist mode would allow it; the engine turns the throw
 * into `engine_error` and fail_mode decides.
 */
export function prepareNetworkSubject(subject: NetworkSubject, out: PreparedNetwork): PreparedNetwork {
  const port = subject.port;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new TypeError('subject port is not 0..65535');
  }
  out.port = port;
  out.name = null;
  out.literalFamily = 0;
  out.ipFamily = 0;
  let domain = subject.domain;
  if (domain !== undefined && domain !== null && domain !== '') {
    if (typeof domain !== 'string') throw new TypeError('subject domain is not a string');
    domain = stripPort(domain);
    out.name = normalizeDomainSubject(domain);
    // A name that is an address literal (Host: 10.1.2.3, [2001:db8::1]) is also judged as an address.
    const last = domain.charCodeAt(domain.length - 1);
    const bracketed = domain.charCodeAt(0) === 91 && last === 93;
    if ((last >= 48 && last <= 57) || bracketed || domain.includes(':')) {
      const start = bracketed ? 1 : 0;
      const end = bracketed ? domain.length - 1 : domain.length;
      out.literalFamily = parseIpInto(domain, start, end, out.literal);
      if (out.literalFamily !== 0) out.name = null;
    }
  }
  const ip = subject.ip;
  if (ip !== undefined && ip !== null && ip !== '') {
    if (typeof ip !== 'string') throw new TypeError('subject ip is not a string');
    let end = ip.length;
    const pct = ip.indexOf('%'); // a zone index (fe80::1%eth0) says nothing about the destination
    if (pct >= 0) end = pct;
    out.ipFamily = parseIpInto(ip, 0, end, out.ip);
    if (out.ipFamily === 0) throw new TypeError('subject ip is not an IP address');
  }
  return out;
}

/**
 * Drops a `:port` a Host header carries (`github.com:8080`, `[2001:db8::1]:443`): the port is
 * judged from the subject's `port`, and leaving it on would make the name match no entry, which
 * in blacklist mode would let a denied host through.
 */
function stripPort(domain: string): string {
  const colon = domain.lastIndexOf(':');
  if (colon < 0) return domain;
  if (domain.charCodeAt(0) === 91) {
    const close = domain.indexOf(']');
    return close > 0 && colon === close + 1 && parsePort(domain.slice(colon + 1)) !== null
      ? domain.slice(0, close + 1)
      : domain;
  }
  if (domain.indexOf(':') !== colon) return domain; // a bare IPv6 literal
  return parsePort(domain.slice(colon + 1)) !== null ? domain.slice(0, colon) : domain;
}

/** The compiled entries of one network list (allow or deny). */
export class NetworkIndex {
  readonly domains = new DomainIndex();
  readonly ips = new IpIndex();

  /** Adds an entry; inert entries are skipped (they can never match by definition). */
  add(entry: unknown): void {
    const e = parseNetworkEntry(entry);
    if ('problem' in e) return;
    const rule = entry as string;
    if (e.kind === 'domain') {
      this.domains.add(e.domain, e.wildcard, e.port, rule);
      return;
    }
    this.ips.add(e.family, e.w, e.len, e.port, rule);
    if (e.coversAllV4) this.ips.add(4, new Uint32Array(4), 0, e.port, rule);
  }

  /** The entry matching a prepared subject (domain entries against its domain, IP entries against its IP), or null. */
  match(s: PreparedNetwork): string | null {
    if (s.name !== null && this.domains.size > 0) {
      const r = this.domains.match(s.name, s.port);
      if (r !== null) return r;
    }
    if (this.ips.size === 0) return null;
    if (s.literalFamily !== 0) {
      const r = this.ips.matchParsed(s.literalFamily, s.literal, s.port);
      if (r !== null) return r;
    }
    if (s.ipFamily !== 0) return this.ips.matchParsed(s.ipFamily, s.ip, s.port);
    return null;
  }
}

/**
 * The address a reverse-lookup name stands for: `10.2.19.198.in-addr.arpa` -> `198.19.2.10`, the 32-nibble
 * `ip6.arpa` form -> the IPv6 address. Null for anything else (a zone-level name such as `19.198.in-addr.arpa`).
 */
export function ptrAddress(name: string): string | null {
  const n = name.toLowerCase().replace(/\.$/, '');
  if (n.endsWith('.in-addr.arpa')) {
    const parts = n.slice(0, -'.in-addr.arpa'.length).split('.');
    if (parts.length !== 4 || parts.some((p) => !/^(?:0|[1-9][0-9]{0,2})$/.test(p) || Number(p) > 255)) return null;
    return parts.reverse().join('.');
  }
  if (n.endsWith('.ip6.arpa')) {
    const nib = n.slice(0, -'.ip6.arpa'.length).split('.');
    if (nib.length !== 32 || nib.some((x) => !/^[0-9a-f]$/.test(x))) return null;
    const hex = nib.reverse().join('');
    return hex.match(/.{4}/g)!.join(':');
  }
  return null;
}

/**
 * A DNS query name as a network subject: a domain judged without a port (SOME/ALL port sentinels in the
 * indexes), and, for a reverse-lookup name, the address it stands for. Fills `out` like prepareNetworkSubject.
 */
export function prepareDnsName(name: string, out: PreparedNetwork): PreparedNetwork {
  out.name = normalizeDomainSubject(name);
  out.literalFamily = 0;
  out.ipFamily = 0;
  out.port = 0;
  const addr = ptrAddress(name);
  if (addr !== null) out.ipFamily = parseIpInto(addr, 0, addr.length, out.ip);
  return out;
}
