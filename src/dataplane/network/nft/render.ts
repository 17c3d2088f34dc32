import { createHash } from 'node:crypto';
import { LeashError } from '../../../errors.js';
import { LISTENER_MARK, PORT_MAX, PORT_MIN } from '../ports.js';

/**
 * The kernel side of the network surface.
 *
 * Layout (one per host, shared by every subject):
 *   table ip leash / table ip6 leash   chain output: nat, hook output, priority -100 (dstnat is refused there)
 *   table inet leash_filter           chain output: filter, hook output, priority 0
 *                                     chain input: filter, hook input, priority 0 (the guard, below)
 * Each hooked chain holds one rule, `meta skuid vmap @agents`: a verdict map from UID to `jump agent_<uid>`, so a
 * packet finds its subject's chain in one lookup however many subjects there are (a rule per UID made every packet
 * of the host walk them all). A subject's rules live in its own hookless chain `agent_<uid>`. Adding, changing or
 * releasing one subject is one `nft -f` transaction touching only its chains and its map element: nothing flushes
 * a shared chain or deletes a shared table while another subject is applied, because that would silently disarm
 * the others. Reading the state for one subject lists only its chains, the hooked chains and the maps, in one
 * `nft -i` run, never whole tables (at 1,000 subjects the three tables hold about 18,000 chains and rules).
 */

/** Ports 18000-20999 on loopback are Leash's: an attempt at any of them is refused by the UID's own listener. */
export const PROXY_PORT_MIN = PORT_MIN;
export const PROXY_PORT_MAX = PORT_MAX;
/** The single-subject listener port (inside the reserved range, so a direct attempt is refused at the attempter's own listener). */
export const SINGLE_SUBJECT_PORT = 18443;

export const NAT_TABLES = [
  { family: 'ip', table: 'leash' },
  { family: 'ip6', table: 'leash' },
] as const;
export const FILTER_TABLE = { family: 'inet', table: 'leash_filter' } as const;
export type TableRef = { family: 'ip' | 'ip6' | 'inet'; table: string };
export const ALL_TABLES: readonly TableRef[] = [...NAT_TABLES, FILTER_TABLE];

/** What the kernel needs to know about one subject. */
export interface SubjectRules {
  uid: number;
  /** The subject's proxy port (loopback, both families). */
  port: number;
  /** The subject's DNS forwarder port (loopback, both families, UDP and TCP): all its port-53 traffic goes there. */
  dnsPort: number;
  /** `drop` (default): UDP other than DNS (redirected to the forwarder) is dropped. `allow`: UDP is not filtered. */
  udp: 'drop' | 'allow';
  /**
   * Sealed: nothing this UID sends leaves or reaches a local port (TCP reset, the rest dropped), with no redirect.
   * For a subject whose listener cannot open (its port held by another process) or that has no port: a redirect
   * would reach nothing of ours, or another process's socket (`port` and `dnsPort` are not used).
   */
  sealed?: boolean;
}

/** The rule bodies of one subject's three chains, in order. */
export interface RenderedSubject {
  uid: number;
  chain: string;
  ip: string[];
  ip6: string[];
  filter: string[];
  /** Fingerprint of everything above; carried in each rule's comment so an unchanged subject is recognised. */
  hash: string;
}

export function chainName(uid: number): string {
  return `agent_${uid}`;
}

export function dispatchComment(uid: number): string {
  return `leash:${uid}`;
}

export function validate(s: SubjectRules): void {
  if (!Number.isInteger(s.uid) || s.uid < 0 || s.uid > 0xfffffffe)
    throw new LeashError('network_rule_invalid', `bad uid ${s.uid}`);
  if (s.sealed) return;
  if (!Number.isInteger(s.port) || s.port < 1 || s.port > 65535)
    throw new LeashError('network_rule_invalid', `bad proxy port ${s.port}`);
  if (!Number.isInteger(s.dnsPort) || s.dnsPort < 1 || s.dnsPort > 65535 || s.dnsPort === s.port)
    throw new LeashError('network_rule_invalid', `bad DNS forwarder port ${s.dnsPort}`);
}

/** Renders one subject's chain contents (pure; the unit tests pin the exact rules). */
export function renderSubject(s: SubjectRules): RenderedSubject {
  validate(s);
  if (s.sealed) return withHash(s.uid, [], [], ['meta l4proto tcp reject with tcp reset', 'drop']);
  // DNS first: every UDP and TCP query to port 53, whatever the destination (a resolver, 127.0.0.53, an attacker's
  // server), goes to this subject's own forwarder, which judges the name; nothing on port 53 leaves unjudged.
  const dns = [`udp dport 53 redirect to :${s.dnsPort}`, `tcp dport 53 redirect to :${s.dnsPort}`];
  // Then every other TCP connection, loopback included, goes to this UID's own listener: a local service (a forward
  // proxy, an SSH SOCKS tunnel, a container API, a database) is judged by the subject's policy like any destination
  // (`localhost:3000`, `127.0.0.1:5432`, `[::1]:8080`). An attempt at a proxy port lands on the UID's own listener
  // and is refused there as not redirected, never crossing to another subject.
  const ip = [...dns, `meta l4proto tcp redirect to :${s.port}`];
  const ip6 = [...dns, `meta l4proto tcp redirect to :${s.port}`];
  const filter: string[] = [];
  if (s.udp === 'allow') {
    filter.push('meta l4proto udp return');
  } else {
    // After the nat hook the redirected query is addressed to the forwarder itself: that is the one UDP let out.
    filter.push(`ip daddr 127.0.0.1 udp dport ${s.dnsPort} return`);
    filter.push(`ip6 daddr ::1 udp dport ${s.dnsPort} return`);
  }
  // TCP goes to the proxy (nat above); anything else that is not inspected is not let through: UDP (QUIC), and
  // the other unprivileged IP protocols (ICMP echo sockets, SCTP) a TCP proxy cannot broker either.
  filter.push('meta l4proto != tcp drop');
  // The nat chain only sees a connection's first packet. A SYN whose addresses and ports match a conntrack entry
  // still held from an earlier connection (one closed by a reset stays 10 s) joins that entry and keeps its
  // translation: none when another account (the proxy's own upstream connection, any daemon) made it, which would
  // send the subject straight to the destination, or another subject's redirect. So TCP is checked after nat too:
  // it leaves only to this subject's own listener and forwarder, or as the answer on a connection made to it.
  // One rule per port rather than an anonymous set `{ port, dnsPort }`: nft reads every set of a table to list any
  // chain of it, so 1,000 subjects' anonymous sets made listing one chain cost as much as listing the table.
  for (const port of [s.port, s.dnsPort]) filter.push(`ip daddr 127.0.0.1 tcp dport ${port} return`);
  for (const port of [s.port, s.dnsPort]) filter.push(`ip6 daddr ::1 tcp dport ${port} return`);
  filter.push('ct direction reply ct state established return');
  filter.push('drop');
  return withHash(s.uid, ip, ip6, filter);
}

function withHash(uid: number, ip: string[], ip6: string[], filter: string[]): RenderedSubject {
  const hash = createHash('sha256')
    .update(JSON.stringify([uid, ip, ip6, filter]))
    .digest('hex')
    .slice(0, 16);
  return { uid, chain: chainName(uid), ip, ip6, filter, hash };
}

function rulesFor(r: RenderedSubject, t: TableRef): string[] {
  return t.family === 'ip' ? r.ip : t.family === 'ip6' ? r.ip6 : r.filter;
}

function hookSpec(t: TableRef): string {
  return t.family === 'inet'
    ? '{ type filter hook output priority 0; policy accept; }'
    : '{ type nat hook output priority -100; policy accept; }';
}

function ruleComment(r: RenderedSubject): string {
  return `leash:${r.uid}:${r.hash}`;
}

/** What is in the kernel now, per table: the hooked chain's dispatch rule, the map's elements and the agent chains. */
export interface TableState {
  exists: boolean;
  /** Handles of the hooked chain's dispatch rule (`meta skuid vmap @agents`): exactly one when in shape. */
  dispatch: number[];
  /** uid -> the chain its map element jumps to. Always the whole map, in a scoped read too. */
  elements: Map<number, string>;
  /** Handles of hooked-chain rules that are not the dispatch rule (an older shape: redirects, or a rule per UID). */
  foreign: number[];
  /** chain name -> comments of its rules, in order: every agent chain in a full read, the asked ones in a scoped read. */
  chains: Map<string, (string | null)[]>;
}
export type RulesetState = Map<string, TableState>;

export const MAP = 'agents';
export const DISPATCH_COMMENT = 'leash:dispatch';
export const GUARD_CHAIN = 'input';
export const GUARD_COMMENT = 'leash:guard';

/**
 * The input guard: traffic Leash redirected (conntrack says DNAT) to a port of the listeners' range reaches only a
 * socket marked LISTENER_MARK. The chains outlive a crashed service; until the next one listens, any local process
 * could bind a subject's port and receive its connections and DNS queries (another account, another subject with a
 * looser policy, the agent itself). A TCP SYN to an unmarked socket is reset, a datagram dropped; with no socket at
 * all the lookup matches nothing and the kernel refuses as before. Only the SYN is looked up: later segments belong
 * to a connection the SYN check let through. Every UDP datagram is, as one conntrack entry carries many queries.
 * Only the original direction: the answer to a local client also belongs to a DNAT entry, and its port (the
 * client's own, ephemeral) can fall in the range, as in the lab (ip_local_port_range 1024-65000): its socket is
 * the client's, unmarked, and the answer was dropped.
 */
export function guardRules(): string[] {
  const ports = `${PROXY_PORT_MIN}-${PROXY_PORT_MAX}`;
  const mark = `socket mark != 0x${LISTENER_MARK.toString(16)}`;
  return [
    `ct direction original ct status dnat tcp dport ${ports} tcp flags & (syn | ack) == syn ${mark} counter reject with tcp reset`,
    `ct direction original ct status dnat udp dport ${ports} ${mark} counter drop`,
  ];
}

/** True when the filter table's input chain holds exactly the guard. */
export function isGuardApplied(state: RulesetState): boolean {
  const have = state.get(key(FILTER_TABLE))?.chains.get(GUARD_CHAIN);
  return have?.length === guardRules().length && have.every((c) => c === GUARD_COMMENT);
}

function renderGuard(state: RulesetState): string[] {
  if (isGuardApplied(state)) return [];
  const p = `${FILTER_TABLE.family} ${FILTER_TABLE.table}`;
  return [
    `add chain ${p} ${GUARD_CHAIN} { type filter hook input priority 0; policy accept; }`,
    `flush chain ${p} ${GUARD_CHAIN}`,
    ...guardRules().map((r) => `add rule ${p} ${GUARD_CHAIN} ${r} comment "${GUARD_COMMENT}"`),
  ];
}

export function key(t: { family: string; table: string }): string {
  return `${t.family} ${t.table}`;
}

/** True when the kernel already holds exactly this subject's rendering (so applying it would change nothing). */
export function isApplied(state: RulesetState, r: RenderedSubject): boolean {
  for (const t of ALL_TABLES) {
    const st = state.get(key(t));
    if (!st?.exists || st.dispatch.length !== 1 || st.elements.get(r.uid) !== r.chain) return false;
    const want = rulesFor(r, t);
    const have = st.chains.get(r.chain);
    if (!have || have.length !== want.length || have.some((c) => c !== ruleComment(r))) return false;
  }
  return true;
}

/**
 * The `nft -f` transaction that makes these subjects' chains and map elements exactly theirs (the tables, hooked
 * chains, maps and the one dispatch rule made first where missing).
 */
export function renderApply(state: RulesetState, subjects: RenderedSubject | readonly RenderedSubject[]): string {
  const list = Array.isArray(subjects) ? subjects : [subjects as RenderedSubject];
  const lines: string[] = [];
  for (const t of ALL_TABLES) {
    const st = state.get(key(t));
    const p = `${t.family} ${t.table}`;
    lines.push(`add table ${p}`);
    lines.push(`add chain ${p} output ${hookSpec(t)}`);
    lines.push(`add map ${p} ${MAP} { type uid : verdict; }`);
    const handles = st?.dispatch ?? [];
    if (handles.length === 0) lines.push(`add rule ${p} output meta skuid vmap @${MAP} comment "${DISPATCH_COMMENT}"`);
    for (const h of handles.slice(1)) lines.push(`delete rule ${p} output handle ${h}`);
    for (const r of list) {
      // `add` is idempotent; the flush touches this subject's own chain only, inside the same transaction.
      lines.push(`add chain ${p} ${r.chain}`);
      lines.push(`flush chain ${p} ${r.chain}`);
      for (const rule of rulesFor(r, t)) lines.push(`add rule ${p} ${r.chain} ${rule} comment "${ruleComment(r)}"`);
      const have = st?.elements.get(r.uid);
      if (have === r.chain) continue;
      if (have !== undefined) lines.push(`delete element ${p} ${MAP} { ${r.uid} }`);
      lines.push(`add element ${p} ${MAP} { ${r.uid} : jump ${r.chain} }`);
    }
    if (t === FILTER_TABLE) lines.push(...renderGuard(state));
  }
  return lines.join('\n') + '\n';
}

/** The transaction releasing `uids`; when no other subject remains, the tables themselves go. */
export function renderRelease(state: RulesetState, uids: number[]): string {
  const going = new Set(uids);
  const goingChains = new Set(uids.map(chainName));
  const remaining = [...state.values()].some(
    (st) =>
      [...st.elements.keys()].some((u) => !going.has(u)) ||
      [...st.chains.keys()].some((c) => c !== GUARD_CHAIN && !goingChains.has(c)),
  );
  const lines: string[] = [];
  for (const t of ALL_TABLES) {
    const st = state.get(key(t));
    if (!st?.exists) continue;
    const p = `${t.family} ${t.table}`;
    if (!remaining) {
      lines.push(`delete table ${p}`);
      continue;
    }
    for (const uid of uids) {
      // The element first: a chain a map element still jumps to cannot be deleted.
      if (st.elements.has(uid)) lines.push(`delete element ${p} ${MAP} { ${uid} }`);
      if (st.chains.has(chainName(uid))) lines.push(`delete chain ${p} ${chainName(uid)}`);
    }
  }
  return lines.length ? lines.join('\n') + '\n' : '';
}
