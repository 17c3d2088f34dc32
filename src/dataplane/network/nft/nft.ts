import { createHash } from 'node:crypto';
import { LeashError } from '../../../errors.js';
import { loadNative, type NftReadAsk, type NftReadTable } from '../../../native.js';
import { PORT_MAX, PORT_MIN } from '../ports.js';
import type { Runner } from './run.js';

/**
 * The kernel side of the network surface.
 *
 * Layout (one per host, shared by every subject):
 *   table ip leash / table ip6 leash   chain output: nat, hook output, priority -100 (dstnat is refused there)
 *   table inet leash_filter           chain output: filter, hook output, priority 0
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
type TableRef = { family: 'ip' | 'ip6' | 'inet'; table: string };
const ALL_TABLES: readonly TableRef[] = [...NAT_TABLES, FILTER_TABLE];

/** What the kernel needs to know about one subject. */
export interface SubjectRules {
  uid: number;
  /** The subject's proxy port (loopback, both families). */
  port: number;
  /** The subject's DNS forwarder port (loopback, both families, UDP and TCP): all its port-53 traffic goes there. */
  dnsPort: number;
  /** `drop` (default): UDP other than DNS (redirected to the forwarder) is dropped. `allow`: UDP is not filtered. */
  udp: 'drop' | 'allow';
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

function dispatchComment(uid: number): string {
  return `leash:${uid}`;
}

function validate(s: SubjectRules): void {
  if (!Number.isInteger(s.uid) || s.uid < 0 || s.uid > 0xfffffffe)
    throw new LeashError('network_rule_invalid', `bad uid ${s.uid}`);
  if (!Number.isInteger(s.port) || s.port < 1 || s.port > 65535)
    throw new LeashError('network_rule_invalid', `bad proxy port ${s.port}`);
  if (!Number.isInteger(s.dnsPort) || s.dnsPort < 1 || s.dnsPort > 65535 || s.dnsPort === s.port)
    throw new LeashError('network_rule_invalid', `bad DNS forwarder port ${s.dnsPort}`);
}

/** Renders one subject's chain contents (pure; the unit tests pin the exact rules). */
export function renderSubject(s: SubjectRules): RenderedSubject {
  validate(s);
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
  const hash = createHash('sha256')
    .update(JSON.stringify([s.uid, ip, ip6, filter]))
    .digest('hex')
    .slice(0, 16);
  return { uid: s.uid, chain: chainName(s.uid), ip, ip6, filter, hash };
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

const MAP = 'agents';
const DISPATCH_COMMENT = 'leash:dispatch';

function key(t: { family: string; table: string }): string {
  return `${t.family} ${t.table}`;
}

interface NftJsonRule {
  family: string;
  table: string;
  chain: string;
  handle: number;
  comment?: string;
  expr: unknown[];
}

function isDispatch(rule: NftJsonRule): boolean {
  // Exactly: meta skuid vmap @agents. Anything else in the hooked chain is foreign.
  if (rule.expr.length !== 1) return false;
  const v = (rule.expr[0] as { vmap?: { key?: { meta?: { key?: string } }; data?: unknown } }).vmap;
  return v?.key?.meta?.key === 'skuid' && v.data === `@${MAP}`;
}

/** One map element as nft -j prints it: `[uid, {"jump": {"target": "agent_uid"}}]`. */
function element(e: unknown): [number, string] | null {
  if (!Array.isArray(e) || e.length !== 2) return null;
  const k = typeof e[0] === 'number' ? e[0] : (e[0] as { elem?: { val?: unknown } })?.elem?.val;
  const target = (e[1] as { jump?: { target?: unknown } })?.jump?.target;
  return typeof k === 'number' && typeof target === 'string' ? [k, target] : null;
}

function emptyState(): RulesetState {
  return new Map(
    ALL_TABLES.map((t) => [
      key(t),
      { exists: false, dispatch: [], elements: new Map(), foreign: [], chains: new Map() } as TableState,
    ]),
  );
}

/** Files the objects of one `nft -j` document under their tables. */
function absorb(state: RulesetState, doc: { nftables?: Record<string, unknown>[] }): void {
  for (const item of doc.nftables ?? []) {
    const obj = (item.table ?? item.chain ?? item.map ?? item.rule) as {
      family?: string;
      table?: string;
      name?: string;
    };
    if (!obj) continue;
    const st = state.get(key({ family: obj.family ?? '', table: item.table ? (obj.name ?? '') : (obj.table ?? '') }));
    if (!st) continue;
    st.exists = true;
    if (item.chain) {
      const name = (item.chain as { name: string }).name;
      if (name !== 'output' && !st.chains.has(name)) st.chains.set(name, []);
    } else if (item.map) {
      const m = item.map as { name: string; elem?: unknown[] };
      if (m.name !== MAP) continue;
      for (const e of m.elem ?? []) {
        const el = element(e);
        if (el) st.elements.set(el[0], el[1]);
      }
    } else if (item.rule) {
      const r = item.rule as NftJsonRule;
      if (r.chain === 'output') (isDispatch(r) ? st.dispatch : st.foreign).push(r.handle);
      else st.chains.set(r.chain, [...(st.chains.get(r.chain) ?? []), r.comment ?? null]);
    }
  }
}

function nftError(what: string, stderr: string): LeashError {
  return new LeashError('nft_failed', `${what}: ${stderr.trim()}`, { stderr: stderr.trim() });
}

/** Every leash table listed whole (missing tables are reported as such, not as an error). */
async function readWhole(runner: Runner): Promise<RulesetState> {
  const out = emptyState();
  for (const t of ALL_TABLES) {
    const res = await runner(['nft', '-j', '-a', 'list', 'table', t.family, t.table]);
    if (res.code !== 0) {
      if (/No such file or directory|does not exist/i.test(res.stderr)) continue;
      throw nftError(`nft list table ${t.family} ${t.table}`, res.stderr);
    }
    absorb(out, JSON.parse(res.stdout) as { nftables: Record<string, unknown>[] });
  }
  return out;
}

/** The scoped read through the program: one `nft -i` run, a document a line. */
async function readScopedNft(runner: Runner, uids: readonly number[]): Promise<RulesetState> {
  const cmds: string[] = [];
  for (const t of ALL_TABLES) {
    const p = `${t.family} ${t.table}`;
    cmds.push(`list chain ${p} output`, `list map ${p} ${MAP}`);
    for (const uid of uids) cmds.push(`list chain ${p} ${chainName(uid)}`);
  }
  const res = await runner(['nft', '-j', '-a', '-i'], cmds.join('\n') + '\n');
  if (res.code !== 0) return readWhole(runner);
  const errors = res.stderr.split('\n').filter((l) => /Error:/.test(l));
  const other = errors.find((l) => !/No such file or directory/.test(l));
  if (other !== undefined) throw nftError('nft -i (list)', res.stderr);
  const out = emptyState();
  for (const line of res.stdout.split('\n')) {
    if (!line.trim()) continue;
    try {
      absorb(out, JSON.parse(line) as { nftables: Record<string, unknown>[] });
    } catch {
      throw nftError('nft -i (list): not a JSON document', line.slice(0, 200));
    }
  }
  return out;
}

let onFallback: ((why: string) => void) | null = null;
const toldWhy = new Set<string>();

/**
 * Called once per distinct reason when the kernel read cannot be used and the state is read through nft instead
 * (the same answer, ~20x slower at 1,000 subjects): the service logs it, so a slow reconcile has a stated cause.
 */
export function onKernelReadFallback(fn: ((why: string) => void) | null): void {
  onFallback = fn;
}

function fellBack(why: string): null {
  if (!toldWhy.has(why) && toldWhy.size < 16) {
    toldWhy.add(why);
    onFallback?.(why);
  }
  return null;
}

/**
 * The kernel read (native/proxy/nftread.cc) for a runner that says which namespace it acts in, when the addon loads:
 * a few targeted netlink requests instead of an nft run, whose cache fetch (the whole verdict map again for every
 * `list`) made a scoped read cost ~45 ms at 1,000 subjects against ~2 ms here. Null where it cannot be used.
 */
function kernelRead(runner: Runner, chains: string[] | null): RulesetState | null {
  if (runner.netns === undefined) return null;
  let tables: NftReadTable[];
  try {
    const n = loadNative();
    if (typeof n.nftRead !== 'function') return fellBack('the native addon was built without nftRead');
    const asks: NftReadAsk[] = ALL_TABLES.map((t) => ({ family: t.family, table: t.table, map: MAP, chains }));
    tables = n.nftRead(runner.netns, asks);
  } catch (e) {
    // No addon, or the kernel refused the read: the program's read says what is wrong with the ruleset, if anything.
    return fellBack(e instanceof Error ? e.message : String(e));
  }
  const out = emptyState();
  ALL_TABLES.forEach((t, i) => {
    const r = tables[i]!;
    const st = out.get(key(t))!;
    if (!r.exists) return;
    st.exists = true;
    for (const c of r.chains) if (c !== 'output') st.chains.set(c, []);
    for (const rule of r.rules) {
      if (rule.chain === 'output') (rule.dispatch ? st.dispatch : st.foreign).push(rule.handle);
      else {
        const list = st.chains.get(rule.chain);
        if (list) list.push(rule.comment);
        else st.chains.set(rule.chain, [rule.comment]);
      }
    }
    for (const [u, c] of r.elements) st.elements.set(u, c);
  });
  return out;
}

/**
 * Reads the leash tables. With `uids`, only what applying or releasing those subjects needs: each table's hooked
 * chain and dispatch map, and those subjects' own chains. Without, every table whole. Both from the kernel when
 * the runner names its namespace and the addon loads; else through the program: a scoped read is one `nft -i` run
 * (a list of something absent is an ENOENT on stderr, which means "not there"), and an nft that cannot run `-i`
 * (built without its CLI) is read whole instead.
 */
export async function readState(runner: Runner, uids?: readonly number[]): Promise<RulesetState> {
  // The hooked chain and each subject's own, or (null) every chain.
  return kernelRead(runner, uids ? ['output', ...uids.map(chainName)] : null) ?? readStateByProgram(runner, uids);
}

/** The same read through the program only (the tests compare it with the kernel read). */
export async function readStateByProgram(runner: Runner, uids?: readonly number[]): Promise<RulesetState> {
  return uids ? readScopedNft(runner, uids) : readWhole(runner);
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
  }
  return lines.join('\n') + '\n';
}

/** The transaction releasing `uids`; when no other subject remains, the tables themselves go. */
export function renderRelease(state: RulesetState, uids: number[]): string {
  const going = new Set(uids);
  const goingChains = new Set(uids.map(chainName));
  const remaining = [...state.values()].some(
    (st) =>
      [...st.elements.keys()].some((u) => !going.has(u)) || [...st.chains.keys()].some((c) => !goingChains.has(c)),
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

async function nftApply(runner: Runner, script: string): Promise<void> {
  const res = await runner(['nft', '-f', '-'], script);
  if (res.code !== 0) throw nftError('nft -f failed', res.stderr);
}

export type ApplyOutcome = 'added' | 'changed' | 'unchanged';

/** Up to this many subjects at once, the state is read for them alone; more (a start) read the tables whole. */
const SCOPED_READ_MAX = 64;

/**
 * Renders each subject, reads the tables once and applies every subject whose chains differ in one
 * `nft -f` transaction. A subject that cannot be rendered gets its error; a refused transaction throws.
 */
async function applyTogether(runner: Runner, list: SubjectRules[]): Promise<Map<number, ApplyOutcome | Error>> {
  const out = new Map<number, ApplyOutcome | Error>();
  const rendered: RenderedSubject[] = [];
  for (const s of list) {
    try {
      rendered.push(renderSubject(s));
    } catch (e) {
      out.set(s.uid, e as Error); // e.g. a resolver that is not an IP: this subject alone
    }
  }
  if (rendered.length === 0) return out;
  const state = await readState(runner, rendered.length <= SCOPED_READ_MAX ? rendered.map((r) => r.uid) : undefined);
  const todo: RenderedSubject[] = [];
  const changed = new Map<number, ApplyOutcome>();
  for (const r of rendered) {
    if (isApplied(state, r)) {
      out.set(r.uid, 'unchanged');
      continue;
    }
    const existed = [...state.values()].some((st) => st.chains.has(r.chain) || st.elements.has(r.uid));
    todo.push(r);
    changed.set(r.uid, existed ? 'changed' : 'added');
  }
  if (todo.length) await nftApply(runner, renderApply(state, todo));
  for (const [uid, o] of changed) out.set(uid, o);
  return out;
}

/** Applies one subject atomically. An unchanged subject is not touched at all. */
export async function applySubject(runner: Runner, s: SubjectRules): Promise<ApplyOutcome> {
  const r = (await applyTogether(runner, [s])).get(s.uid)!;
  if (r instanceof Error) throw r;
  return r;
}

/**
 * Applies many subjects with one read of the tables and one `nft -f` transaction (a service start
 * with hundreds of subjects would otherwise pay two nft runs per subject). When that fails, each subject is
 * applied on its own, so one that cannot be applied fails alone. Returns each subject's outcome, or the error of
 * one that failed.
 */
export async function applySubjects(runner: Runner, list: SubjectRules[]): Promise<Map<number, ApplyOutcome | Error>> {
  try {
    return await applyTogether(runner, list);
  } catch {
    const out = new Map<number, ApplyOutcome | Error>();
    for (const s of list) {
      try {
        out.set(s.uid, await applySubject(runner, s));
      } catch (e) {
        out.set(s.uid, e as Error);
      }
    }
    return out;
  }
}

/** Releases the given subjects (their chains and map elements); drops the tables when none remain. */
export async function releaseSubjects(runner: Runner, uids: number[]): Promise<void> {
  const state = await readState(runner, uids.length <= SCOPED_READ_MAX ? uids : undefined);
  const script = renderRelease(state, uids);
  if (script) await nftApply(runner, script);
}

/** The UIDs that have a chain or a map element in any leash table (of a whole read). */
export function appliedUids(state: RulesetState): number[] {
  const uids = new Set<number>();
  for (const st of state.values()) {
    for (const u of st.elements.keys()) uids.add(u);
    for (const c of st.chains.keys()) {
      const m = /^agent_(\d+)$/.exec(c);
      if (m) uids.add(Number(m[1]));
    }
  }
  return [...uids].sort((a, b) => a - b);
}

/**
 * Drops any leash table still in an older shape: rules straight in the hooked chain (redirects, or one
 * `meta skuid <uid> jump agent_<uid>` rule per subject from before the dispatch map). A stale redirect there is a
 * terminal verdict that wins over the map, freezing that UID on its old policy. Called once at startup, before
 * the first subject is applied. Returns the tables dropped.
 */
export async function dropLegacyShape(runner: Runner, warn: (msg: string) => void): Promise<string[]> {
  const state = await readState(runner, []);
  const dropped: string[] = [];
  for (const t of ALL_TABLES) {
    const st = state.get(key(t));
    if (st?.exists && st.foreign.length > 0) dropped.push(`${t.family} ${t.table}`);
  }
  if (dropped.length) {
    await nftApply(runner, dropped.map((p) => `delete table ${p}`).join('\n') + '\n');
    warn(`leash: dropped nftables table(s) in the old shape: ${dropped.join(', ')}`);
  }
  return dropped;
}

/** True when `nft` can be run through this runner. */
export async function nftAvailable(runner: Runner): Promise<boolean> {
  const res = await runner(['nft', '--version']);
  return res.code === 0;
}

// ---------------------------------------------------------------------------------------------------------------
// iptables fallback: IPv4 TCP for ONE UID (loopback included, as with nft). It appends into the built-in nat OUTPUT chain, which cannot express a
// per-UID dispatch, so several subjects are refused rather than one policy silently applied to all.

/** The `iptables -S` lines the fallback keeps in nat OUTPUT for one subject (the exact canonical form). */
export function renderIptables(s: SubjectRules): string[] {
  validate(s);
  const c = `-m comment --comment "${dispatchComment(s.uid)}"`;
  return [`-A OUTPUT -p tcp -m owner --uid-owner ${s.uid} ${c} -j REDIRECT --to-ports ${s.port}`];
}

async function iptablesLeashLines(runner: Runner): Promise<string[]> {
  const res = await runner(['iptables', '-w', '-t', 'nat', '-S', 'OUTPUT']);
  if (res.code !== 0)
    throw new LeashError('iptables_failed', `iptables -S failed: ${res.stderr.trim()}`, { stderr: res.stderr.trim() });
  return res.stdout.split('\n').filter((l) => /--comment "?leash:\d+"?/.test(l));
}

async function iptablesRestore(runner: Runner, lines: string[]): Promise<void> {
  if (!lines.length) return;
  const res = await runner(['iptables-restore', '-w', '--noflush'], `*nat\n${lines.join('\n')}\nCOMMIT\n`);
  if (res.code !== 0)
    throw new LeashError('iptables_failed', `iptables-restore failed: ${res.stderr.trim()}`, {
      stderr: res.stderr.trim(),
    });
}

/** Applies the single subject with iptables; one transaction (iptables-restore --noflush). */
export async function applyIptables(runner: Runner, s: SubjectRules): Promise<ApplyOutcome> {
  const want = renderIptables(s);
  const have = await iptablesLeashLines(runner);
  const others = have.filter((l) => !l.includes(`"${dispatchComment(s.uid)}"`) && !l.endsWith(dispatchComment(s.uid)));
  if (others.length) throw new LeashError('iptables_single_subject', 'the iptables fallback holds one subject only');
  if (have.length === want.length && have.every((l, i) => l === want[i])) return 'unchanged';
  await iptablesRestore(runner, [...have.map((l) => l.replace(/^-A /, '-D ')), ...want]);
  return have.length ? 'changed' : 'added';
}

export async function releaseIptables(runner: Runner, uids: number[]): Promise<void> {
  const have = await iptablesLeashLines(runner);
  const mine = have.filter((l) => uids.some((u) => l.includes(`"${dispatchComment(u)}"`)));
  await iptablesRestore(
    runner,
    mine.map((l) => l.replace(/^-A /, '-D ')),
  );
}

// ---------------------------------------------------------------------------------------------------------------

export type Backend = 'nft' | 'iptables';

export interface Firewall {
  readonly backend: Backend;
  apply(s: SubjectRules): Promise<ApplyOutcome>;
  /** Many subjects in one transaction when the backend can (see applySubjects); per-subject results. */
  applyMany(list: SubjectRules[]): Promise<Map<number, ApplyOutcome | Error>>;
  release(uids: number[]): Promise<void>;
  /** UIDs currently holding rules. */
  applied(): Promise<number[]>;
}

export interface FirewallOptions {
  runner: Runner;
  /** How many subjects the caller will apply; the iptables fallback refuses more than one. */
  subjects: number;
  /** Where the fallback's notice goes (stderr by default). */
  warn?: (msg: string) => void;
}

/**
 * Picks nft, or the iptables fallback when nft cannot be run (saying so: it covers IPv4 TCP only, no IPv6, no UDP
 * filter). With several subjects and no nft it refuses rather than apply one subject's redirect to all.
 */
export async function openFirewall(opts: FirewallOptions): Promise<Firewall> {
  const warn = opts.warn ?? ((m: string) => process.stderr.write(m + '\n'));
  const { runner } = opts;
  if (await nftAvailable(runner)) {
    return {
      backend: 'nft',
      apply: (s) => applySubject(runner, s),
      applyMany: (list) => applySubjects(runner, list),
      release: (uids) => releaseSubjects(runner, uids),
      applied: async () => appliedUids(await readState(runner)),
    };
  }
  if (opts.subjects > 1)
    throw new LeashError(
      'nft_missing_multi',
      `nft is not available and ${opts.subjects} subjects are configured: the iptables fallback enforces one UID only; install nftables`,
    );
  warn('leash: nft not found; iptables fallback: IPv4 TCP only for one UID (no IPv6 redirect, no UDP filter)');
  return {
    backend: 'iptables',
    apply: (s) => applyIptables(runner, s),
    applyMany: async (list) => {
      const out = new Map<number, ApplyOutcome | Error>();
      for (const s of list) {
        try {
          out.set(s.uid, await applyIptables(runner, s));
        } catch (e) {
          out.set(s.uid, e as Error);
        }
      }
      return out;
    },
    release: (uids) => releaseIptables(runner, uids),
    applied: async () =>
      [...new Set((await iptablesLeashLines(runner)).map((l) => Number(/leash:(\d+)/.exec(l)?.[1] ?? NaN)))].filter(
        (n) => Number.isInteger(n),
      ),
  };
}
