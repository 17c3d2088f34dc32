/**
 * What the proxy's two ways in (arrival-native.ts, arrival-stream.ts) share, owned here and handed to both: the
 * options, the connection caps and counts, the resolver, the decision log, the relay and the way a connection is
 * reset. Neither way in calls back into the proxy.
 */
import type net from 'node:net';
import type { FailMode } from '../../../engine/types.js';
import type { Asker } from '../../../engine/approval.js';
import type { DecisionWriter } from '../../../log/decisions.js';
import { nativeProxy } from '../../../native.js';
import type { OriginalDst } from '../addon.js';
import { createForgetter } from './forget.js';
import { PEEK_MAX_BYTES, PEEK_TIMEOUT_MS } from './peek.js';
import { createRelay, type RelayOwner } from './relay.js';
import { createNameResolver, ownAddresses, plainIp, resolveName } from './resolve.js';
import {
  destinationVerdict,
  nameToResolve,
  type Allowed,
  type Destination,
  type Line,
  type NetworkDecide,
  type SubjectPolicy,
} from './verdict.js';

export interface ErrorContext {
  uid: number;
  stage: string;
  /** Calls like this one held back in the window that just ended. */
  suppressed?: number;
}

export const DEFAULT_MAX_CONNECTIONS = 16384;
export const DEFAULT_MAX_PER_SUBJECT = 8192;

export interface ProxyOptions<P> {
  decide: NetworkDecide<P>;
  log: DecisionWriter;
  /** Resolvers a domain-decided allow is resolved through (IP literals, optionally :port). */
  resolvers: string[];
  /** Addresses the subject's own DNS answers (the forwarder) gave for a name: a name-decided connection may go there. */
  seen?: (uid: number, name: string) => string[];
  /** Replaces the built-in resolution (dns.Resolver on `resolvers`, cached by TTL); returns the name's addresses. */
  resolve?: (name: string) => Promise<string[]>;
  /** Listen addresses (default 127.0.0.1 and ::1). */
  hosts?: string[];
  /** Reads SO_ORIGINAL_DST (default: the addon). */
  originalDst?: (fd: number) => OriginalDst;
  peekBytes?: number;
  peekTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** Move allowed bytes with splice(2) on the addon's pump thread (default true; false = a Node pipe). */
  splice?: boolean;
  /**
   * Operational errors (upstream unreachable, out of descriptors, a cap reached), for the service's own log.
   * Rate-limited per stage and error code: at most one call per `errorWindowMs`; the calls held back are counted
   * and reported as `suppressed` on one call at the end of the window.
   */
  onError?: (err: Error, ctx: ErrorContext) => void;
  errorWindowMs?: number;
  /** Each connection's set-up time (accept to decided and relaying, or refused), in seconds: the metrics. */
  onSetup?: (seconds: number) => void;
  /** Connections open at once, all subjects together (default 16384: two descriptors each, see docs/network.md). */
  maxConnections?: number;
  /** Connections open at once per subject (default 8192). */
  maxPerSubject?: number;
  /**
   * The fail_mode a listener without a policy answers under until setFailMode says otherwise (the service pushes the
   * floor's at each pass). closed (default): reset `no_policy`; open: allowed to the original destination.
   */
  failMode?: FailMode;
  /**
   * The approvals queue (docs/approvals.md): a connection the engine answers `ask` is held, nothing sent upstream,
   * until an approver decides or the deadline passes. Absent: an ask is refused at once (`approval_unavailable`).
   */
  ask?: Asker;
  /** Give memory back after a load peak (default true; see settle.ts). */
  settle?: boolean;
  /**
   * Accept and peek in native code on Node's loop (native/proxy/acceptor.cc), handing a decided connection straight
   * to the splice pump with no net.Socket (default true when the addon has it and splice is on); what needs
   * JavaScript's streams (plain HTTP, asks, address-decided early connects) is handed to a net.Socket on the same
   * descriptor.
   */
  nativeAccept?: boolean;
}

/** One subject's listeners and connections. */
export interface ProxyEntry<P> extends RelayOwner {
  port: number;
  /** Native listener ids (the native acceptor). */
  listenIds: number[];
  /** Connections the native acceptor holds for this entry. */
  held: Set<number>;
  /** Client connections open now. */
  active: number;
  policy: P | null;
  ech: 'refuse' | 'allow';
  servers: net.Server[];
}

/** The state both ways in receive: made once per proxy, owned by it. */
export type ProxyState<P> = ReturnType<typeof createProxyState<P>>;

export function createProxyState<P>(opts: ProxyOptions<P>, entries: Map<number, ProxyEntry<P>>) {
  const onError = rateLimitErrors(opts.onError ?? (() => {}), opts.errorWindowMs ?? 10_000);
  const forget = createForgetter(onError);
  const relay = createRelay({
    splice: opts.splice !== false,
    connectTimeoutMs: opts.connectTimeoutMs ?? 10_000,
    onError,
    forget,
  });
  return {
    opts,
    /** The floor's fail_mode as last pushed (Proxy.setFailMode): read at each connection to a listener without a policy. */
    floor: { failMode: opts.failMode ?? 'closed' } as { failMode: FailMode },
    hosts: opts.hosts ?? ['127.0.0.1', '::1'],
    peekBytes: opts.peekBytes ?? PEEK_MAX_BYTES,
    peekTimeoutMs: opts.peekTimeoutMs ?? PEEK_TIMEOUT_MS,
    /** The caller's own SO_ORIGINAL_DST reader (tests), used instead of what the native acceptor read. */
    dstOverride: opts.originalDst ?? null,
    originalDst: opts.originalDst ?? ((fd: number) => nativeProxy().originalDst(fd)),
    entries,
    caps: createCaps(opts.maxConnections, opts.maxPerSubject, onError),
    forget,
    relay,
    onError,
    resolve: createNameResolver(opts.resolvers, opts.resolve),
  } as const;
}

/** What the verdict reads of an entry, now (its policy, the floor's fail_mode as last pushed). */
export function subjectPolicy<P>(st: ProxyState<P>, e: ProxyEntry<P>): SubjectPolicy<P> {
  const failMode = e.policy === null ? st.floor.failMode : 'closed';
  return { decide: st.opts.decide, policy: e.policy, failMode, ech: e.ech };
}

/** Every address:port this proxy listens on: a connection whose original destination is one of them was not redirected. */
export function isListener<P>(st: ProxyState<P>, dst: OriginalDst): boolean {
  const ip = plainIp(dst.address);
  for (const e of st.entries.values()) if (e.port === dst.port && st.hosts.some((h) => plainIp(h) === ip)) return true;
  return false;
}

/** Writes an entry's lines. */
export function writeLines<P>(st: ProxyState<P>, e: ProxyEntry<P>, lines: Line[]): void {
  for (const l of lines) st.opts.log.write({ uid: e.uid, surface: 'network', ...l });
}

/** Resolves what the allow's destination depends on (if anything), then asks the verdict where it goes. */
export async function destination<P>(st: ProxyState<P>, e: ProxyEntry<P>, a: Allowed): Promise<Destination> {
  const name = nameToResolve(a);
  const resolved =
    name === null ? null : await resolveName(a.subject.ip!, name, st.opts.seen?.(e.uid, name) ?? [], st.resolve);
  return destinationVerdict(subjectPolicy(st, e), a, resolved, ownAddresses());
}

/**
 * Rate-limits an error sink per stage and code: the first call in a window passes, later ones are counted and
 * reported once, with their count, when the window ends. Keys are bounded (stages x codes), never per connection.
 */
export function rateLimitErrors(
  sink: (err: Error, ctx: ErrorContext) => void,
  windowMs: number,
): (err: Error, ctx: ErrorContext) => void {
  const held = new Map<string, { until: number; suppressed: number; last: [Error, ErrorContext] | null }>();
  return (err, ctx) => {
    const key = `${ctx.stage}:${(err as NodeJS.ErrnoException).code ?? err.message}`;
    const now = Date.now();
    const h = held.get(key);
    if (!h) {
      const entry = { until: now + windowMs, suppressed: 0, last: null as [Error, ErrorContext] | null };
      held.set(key, entry);
      setTimeout(() => {
        held.delete(key);
        if (entry.suppressed > 0 && entry.last) sink(entry.last[0], { ...entry.last[1], suppressed: entry.suppressed });
      }, windowMs).unref();
      sink(err, ctx);
      return;
    }
    h.suppressed++;
    h.last = [err, ctx];
  };
}

/** The connection caps, total and per subject, and the counts the settler reads. */
function createCaps(
  maxTotal = DEFAULT_MAX_CONNECTIONS,
  maxPerSubject = DEFAULT_MAX_PER_SUBJECT,
  onError: (err: Error, ctx: ErrorContext) => void,
): {
  /** Counts a connection in: its count-out (once, whichever way it ends), or null when over a cap (logged). */
  admit(e: { uid: number; active: number }): (() => void) | null;
  active(): number;
  opened(): number;
} {
  let active = 0;
  let opened = 0;
  return {
    active: () => active,
    opened: () => opened,
    admit(e) {
      if (active >= maxTotal || e.active >= maxPerSubject) {
        // Over a cap: this connection is refused (a reset, as any block), the others and the service go on.
        const which = active >= maxTotal ? 'total' : 'subject';
        onError(Object.assign(new Error(`connection cap reached (${which})`), { code: `cap_${which}` }), {
          uid: e.uid,
          stage: 'capacity',
        });
        return null;
      }
      active++;
      opened++;
      e.active++;
      let done = false;
      return () => {
        if (done) return;
        done = true;
        active--;
        e.active--;
      };
    },
  };
}
