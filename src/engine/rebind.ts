/**
 * Where a name may lead. A connection decided by a name goes where the name resolves, and whoever controls the
 * name's records (a wildcard DNS service, a domain allowed by suffix) chooses that address: without this check an
 * allowed name is a door into every local service, the cloud metadata address and the private network (dnsmasq's
 * stop-dns-rebind guards the same door). An address is refused for a name when it is local (loopback, unspecified,
 * link-local, multicast, broadcast, or one of the host's own, which the enforcer tells) or internal (the operator's
 * `network.internal` ranges), unless the allow list names that address itself (an IP/CIDR entry, or a `localhost`
 * entry for a loopback address) or, for an internal one, the name is a `network.rebind_ok` entry.
 */
import { NetworkIndex, newPreparedNetwork, type PreparedNetwork } from './network.js';
import { parseIpInto } from './ip.js';
import { SOME_PORT } from './port.js';

/** `network.internal` when the config says nothing: RFC 1918, shared address space, ULA, link-local. */
export const DEFAULT_INTERNAL: readonly string[] = [
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '100.64.0.0/10',
  '169.254.0.0/16',
  'fc00::/7',
];

/**
 * Never reached through a name, whatever `network.internal` says. `::/96` holds `::` and the deprecated
 * IPv4-compatible forms (`::127.0.0.1`); mapped forms (`::ffff:127.0.0.1`) are folded to IPv4 by the parser.
 */
const LOCAL = new NetworkIndex();
for (const r of [
  '0.0.0.0/8',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '224.0.0.0/4',
  '255.255.255.255',
  '::/96',
  '::1/128',
  'fe80::/10',
  'ff00::/8',
])
  LOCAL.add(r);

/** This host by address alone (a `localhost` entry names these): loopback and the unspecified addresses. */
const LOOPBACK = new NetworkIndex();
for (const r of ['127.0.0.0/8', '0.0.0.0', '::1/128', '::']) LOOPBACK.add(r);

/** True for loopback and the unspecified addresses, in any spelling (`::ffff:7f00:1` included). */
export function isLoopbackAddress(ip: string): boolean {
  const s = addressOnly(ip, SOME_PORT, null);
  return s !== null && LOOPBACK.match(s) !== null;
}

/** The compiled `network.internal` ranges and `network.rebind_ok` names of a policy. */
export interface RebindLists {
  internal: NetworkIndex;
  ok: NetworkIndex;
}

/** The `network.internal` entries a policy compiles (absent = DEFAULT_INTERNAL): address-shaped ones only. */
export function internalEntries(internal: readonly string[] | undefined): string[] {
  const out: string[] = [];
  for (const e of internal ?? DEFAULT_INTERNAL) if (/^[0-9a-fA-F:.[\]/]+$/.test(e)) out.push(e);
  return out;
}

/** Compiles the two lists (absent `internal` = DEFAULT_INTERNAL); entries that are not of their kind never match. */
export function compileRebind(internal: readonly string[] | undefined, ok: readonly string[] | undefined): RebindLists {
  const r = { internal: new NetworkIndex(), ok: new NetworkIndex() };
  for (const e of internalEntries(internal)) r.internal.add(e);
  for (const e of ok ?? []) r.ok.add(e);
  return r;
}

const prepared = newPreparedNetwork();

/** What kind of address `ip` is for a name: `local`, `internal`, or null (elsewhere; or not an address). */
export function addressKind(lists: RebindLists, ip: string, own: boolean): 'local' | 'internal' | null {
  if (own) return 'local';
  const s = addressOnly(ip, SOME_PORT, null);
  if (s === null) return null;
  if (LOCAL.match(s) !== null) return 'local';
  return lists.internal.match(s) !== null ? 'internal' : null;
}

function addressOnly(ip: string, port: number, name: string | null): PreparedNetwork | null {
  const pct = ip.indexOf('%');
  const fam = parseIpInto(ip, 0, pct < 0 ? ip.length : pct, prepared.ip);
  if (fam === 0) return null;
  prepared.ipFamily = fam;
  prepared.literalFamily = 0;
  prepared.name = name;
  prepared.port = port;
  return prepared;
}

/**
 * Whether a name-decided connection (or a DNS answer for `name`) may go to `ip` on `port` (SOME_PORT for a DNS
 * answer: any port an entry admits). Returns null when it may, else the kind of address that refuses it.
 * `allow`: the policy's allow list, consulted for the address alone (never the name: the name is what is in doubt).
 * `own`: the enforcer found `ip` to be one of this host's addresses; it and loopback are what a `localhost` entry names.
 */
export function rebindRefusal(
  lists: RebindLists,
  allow: NetworkIndex,
  name: string,
  ip: string,
  port: number,
  own: boolean,
): 'local' | 'internal' | null {
  const loopback = own || isLoopbackAddress(ip);
  const kind = addressKind(lists, ip, own);
  if (kind === null) return null;
  if (kind === 'internal') {
    const n = newPreparedNetwork();
    n.name = name.toLowerCase().replace(/\.$/, '');
    n.port = SOME_PORT;
    if (lists.ok.match(n) !== null) return null;
  }
  const s = addressOnly(ip, port, loopback ? 'localhost' : null);
  if (s !== null && allow.match(s) !== null) return null;
  return kind;
}
