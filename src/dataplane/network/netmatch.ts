/**
 * The network verdict in native code (native/proxy/netmatch.h): a subject's network policy compiled into an
 * immutable native snapshot that gives the engine's verdict for a connection judged by its SNI/Host name and
 * destination, or null where only the engine can answer (then the JavaScript path decides). The entries are parsed
 * here by the engine's own parser, so the grammar has one definition; tests/native/netmatch-diff.test.ts holds the
 * verdicts to the engine's.
 */
import { effectiveFailMode, effectiveMode } from '../../engine/decide.js';
import { parseNetworkEntry, type NetworkEntry } from '../../engine/network.js';
import { internalEntries } from '../../engine/rebind.js';
import type { FailMode, NetworkSubject, PolicyInput, Verdict } from '../../engine/types.js';
import { loadNative } from '../../native.js';

/** One parsed entry and its text (the verdict's `rule`). */
export type NetEntryData = NetworkEntry & { rule: string };

/** What compileNetPolicy reads: the lists as the engine compiles them, inert entries left out. */
export interface NetPolicyData {
  failOpen: boolean;
  shadow: boolean;
  whitelist: boolean;
  allow: NetEntryData[];
  deny: NetEntryData[];
  ask: NetEntryData[];
  /** network.internal (rebind.ts): where a name may not lead unless an entry names the address. */
  internal: NetEntryData[];
  /** network.rebind_ok: names that may lead into `internal`. */
  ok: NetEntryData[];
}

/** Opaque handle to a natively compiled network policy. */
export type NativeNetPolicyHandle = { readonly __nativeNetPolicy: unique symbol };

/** The engine's Verdict for the network surface (no findings). */
export type NetMatchVerdict = Pick<Verdict, 'action' | 'reason' | 'source' | 'rule' | 'wouldBlock'>;

/** Per-subject snapshots: `set` replaces a subject's policy with one atomic store (readers see old or new, whole). */
export interface NetPolicyTableInstance {
  /** `handle` null: the subject has no policy (`failMode` decides, `no_policy`). */
  set(uid: number, handle: NativeNetPolicyHandle | null, failMode?: FailMode): void;
  remove(uid: number): void;
  /** The verdict, or null when the subject is unknown or the engine must decide. */
  match(uid: number, name: string | null, ip: string | null, port: number, own?: boolean): NetMatchVerdict | null;
  size(): number;
}

/** The addon's network matcher (native/proxy/netmatch_napi.cc). */
export interface NativeNetMatchPart {
  compileNetPolicy(policy: NetPolicyData): NativeNetPolicyHandle;
  /** `own` present: a resolved destination of a name-decided connection (NetworkSubject.resolved). */
  netMatch(
    handle: NativeNetPolicyHandle | null,
    name: string | null,
    ip: string | null,
    port: number,
    own?: boolean,
    failMode?: FailMode,
  ): NetMatchVerdict | null;
  /** For the differential test: "action|reason|source|rule|wouldBlock" per case ("\x01null": no rule), or "undecided". */
  netMatchBatch(
    handle: NativeNetPolicyHandle | null,
    names: (string | null)[],
    ips: (string | null)[],
    ports: number[],
    owns: (boolean | undefined)[],
    failMode?: FailMode,
  ): string[];
  NetPolicyTable: new () => NetPolicyTableInstance;
}

function parsed(list: unknown): NetEntryData[] {
  const out: NetEntryData[] = [];
  for (const e of Array.isArray(list) ? (list as unknown[]) : []) {
    const p = parseNetworkEntry(e);
    if (!('problem' in p)) out.push({ ...p, rule: e as string });
  }
  return out;
}

/** A resolved policy's network part as the engine's compilePolicy reads it (malformed modes fail towards blocking). */
export function netPolicyData(p: PolicyInput): NetPolicyData {
  const n = p.network as Partial<PolicyInput['network']> | undefined;
  return {
    failOpen: effectiveFailMode(p.fail_mode) === 'open',
    shadow: p.enforce === 'shadow',
    whitelist: effectiveMode(n?.mode) === 'whitelist',
    allow: parsed(n?.allow),
    deny: parsed(n?.deny),
    ask: parsed(n?.ask),
    internal: parsed(internalEntries(n?.internal)),
    ok: parsed(n?.rebind_ok),
  };
}

/** Compiles a subject's network policy into a native snapshot. */
export function compileNetMatch(p: PolicyInput): NativeNetPolicyHandle {
  return loadNative().compileNetPolicy(netPolicyData(p));
}

/**
 * decide('network', subject, policy) natively: the engine's verdict, or null when the engine must decide.
 * `handle` null: no policy, `failMode` decides.
 */
export function netMatch(
  handle: NativeNetPolicyHandle | null,
  s: NetworkSubject,
  failMode: FailMode = 'closed',
): NetMatchVerdict | null {
  const own = s.resolved === undefined ? undefined : s.resolved.own === true;
  return loadNative().netMatch(handle, s.domain ?? null, s.ip ?? null, s.port, own, failMode);
}
