import net from 'node:net';
import os from 'node:os';
import type { NetworkSubject, Reason, Verdict } from '../../../engine/types.js';
import type { PROXY_REASONS } from '../../../errors.js';
import type { AskOutcome } from '../../../engine/approval.js';
import { logAction } from '../../../engine/decide.js';
import type { DecisionRecord, DecisionWriter } from '../../../log/decisions.js';
import type { NativeAddon, OriginalDst } from '../../../native.js';
import { peekDestination, type PeekResult } from './peek.js';
import type { Relay, RelayOwner } from './relay.js';
import type { Forgetter } from './forget.js';

/**
 * The proxy's native path (native/proxy/acceptor.cc): listeners, accept and peek in native code on Node's loop, so a
 * TLS connection is decided from its peeked ClientHello and handed straight to the splice pump with no net.Socket,
 * no stream and no read into JavaScript. Measured in the lab (bench/proxy), that took the proxy's CPU per new TLS
 * connection from ~800 us to ~370 us. What needs JavaScript's streams (plain HTTP, an ask, an address-decided
 * early connect, shadow mode) is handed to a net.Socket on the same descriptor and goes the stream path's way.
 */

/** A connection's arrival: where it was going and what its address alone decides. */
export interface Arrival {
  dst: OriginalDst;
  ip: string;
  isLoop: boolean;
  bare: NetworkSubject;
  early: Verdict;
}

/** A refusal's decision line (without what the entry supplies). */
export type Refusal = Omit<DecisionRecord, 'uid' | 'surface' | 'action' | 'reason'> & {
  reason: keyof typeof PROXY_REASONS | Reason | AskOutcome['reason'];
};

export type Arrived = { refusal: Refusal } | { arrival: Arrival; byAddress: boolean };

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

/** What the native path borrows from the proxy: the same decisions, caps and relay the stream path uses. */
export interface HeldDeps<P> {
  Acceptor: NonNullable<NativeAddon['Acceptor']>;
  hosts: string[];
  peekBytes: number;
  peekTimeoutMs: number;
  log: DecisionWriter;
  onError: (err: Error, ctx: { uid: number; stage: string }) => void;
  onSetup?: (seconds: number) => void;
  forget: Forgetter;
  relay: Relay;
  /** Counts a connection in under the caps: its count-out (once, whichever way it ends), or null when refused. */
  admit(e: ProxyEntry<P>): (() => void) | null;
  /** `dst`: the original destination as the acceptor read it (or the errno name it failed with). */
  arrive(
    e: ProxyEntry<P>,
    fd: number,
    local: { address: string; port: number },
    peer: { address: string; port: number },
    dst: OriginalDst | { error: string },
  ): Arrived;
  /** The stream path for a connection (from its arrival on). */
  handle(e: ProxyEntry<P>, sock: net.Socket): Promise<void>;
  /** The stream path after the peek. */
  afterPeek(
    e: ProxyEntry<P>,
    sock: net.Socket,
    arrival: Arrival,
    up: net.Socket | null,
    bytes: Buffer,
    result: PeekResult,
  ): Promise<void>;
  judge(e: ProxyEntry<P>, subject: NetworkSubject): Verdict;
  shadow(e: ProxyEntry<P>): boolean;
  /** Where an allowed connection goes, or its refusal: the stream path's own step (see destination in proxy.ts). */
  destination(
    e: ProxyEntry<P>,
    domain: string | null,
    subject: NetworkSubject,
    verdict: Verdict,
  ): Promise<{ target: string } | { refusal: Refusal }>;
}

export interface HeldPath<P> {
  open(e: ProxyEntry<P>): void;
  /** Closes the entry's listeners and resets what it still holds. */
  close(e: ProxyEntry<P>): void;
  /** Every listener and held connection. */
  closeAll(): void;
}

/** A connection the native acceptor holds (accepted, not yet handed to the pump or to a net.Socket). */
interface NativeConn<P> {
  id: number;
  e: ProxyEntry<P>;
  t0: number;
  arrival: Arrival | null;
  /** Counts it out of the caps (once). */
  out: () => void;
  /** Waiting for its first bytes (native peek running). */
  peeking: boolean;
}

export function createHeldPath<P>(d: HeldDeps<P>): HeldPath<P> {
  const held = new Map<number, NativeConn<P>>();
  const tags = new Map<number, ProxyEntry<P>>();
  let nextTag = 0;
  const acceptor = new d.Acceptor({ onAccept: accepted, onPeek: peeked, onError: acceptError });

  function unhold(c: NativeConn<P>, consume = 0): number {
    const fd = acceptor.release(c.id, consume);
    held.delete(c.id);
    c.e.held.delete(c.id);
    return fd;
  }

  function setupDone(c: NativeConn<P>): void {
    d.onSetup?.((performance.now() - c.t0) / 1000);
  }

  /** A held connection refused: its line, then a reset (and its conntrack entry deleted). */
  function refuseHeld(c: NativeConn<P>, rec: Refusal): void {
    d.log.write({ uid: c.e.uid, surface: 'network', action: 'block', ...rec });
    d.forget.resetFd(unhold(c), 'reply', c.e.uid);
    c.out();
    setupDone(c);
  }

  /** A descriptor as a net.Socket of the entry, counted out when it closes. */
  function socketOf(e: ProxyEntry<P>, fd: number, out: () => void, paused: boolean): net.Socket {
    const sock = new net.Socket({
      fd,
      readable: true,
      writable: true,
      allowHalfOpen: true,
      pauseOnCreate: paused,
    } as net.SocketConstructorOpts);
    sock.on('error', () => {});
    sock.setNoDelay(true);
    e.sockets.add(sock);
    sock.on('close', () => {
      out();
      e.sockets.delete(sock);
    });
    return sock;
  }

  function accepted(
    tag: number,
    id: number,
    fd: number,
    localAddr: string,
    localPort: number,
    peerAddr: string,
    peerPort: number,
    dstFamily: 0 | 4 | 6,
    dstAddr: string,
    dstPort: number,
    dstError: string,
  ): void {
    const e = tags.get(tag);
    if (!e) return void acceptor.reset(id);
    const out = d.admit(e);
    if (!out) return void d.forget.resetFd(acceptor.release(id, 0), 'reply', e.uid);
    const c: NativeConn<P> = { id, e, t0: d.onSetup ? performance.now() : 0, arrival: null, out, peeking: false };
    held.set(id, c);
    e.held.add(id);
    let a: Arrived;
    try {
      const dst = dstFamily === 0 ? { error: dstError } : { family: dstFamily, address: dstAddr, port: dstPort };
      a = d.arrive(e, fd, { address: localAddr, port: localPort }, { address: peerAddr, port: peerPort }, dst);
    } catch (err) {
      d.onError(err as Error, { uid: e.uid, stage: 'handle' });
      d.forget.resetFd(unhold(c), 'reply', e.uid);
      out();
      return;
    }
    if ('refusal' in a) return refuseHeld(c, a.refusal);
    if (a.byAddress) {
      // Connected at once by address (a server that speaks first): the stream path does it.
      const sock = socketOf(e, unhold(c), out, true);
      d.handle(e, sock).then(
        () => setupDone(c),
        (err: Error) => {
          d.onError(err, { uid: e.uid, stage: 'handle' });
          d.forget.reset(sock, 'reply', e.uid);
        },
      );
      return;
    }
    c.arrival = a.arrival;
    c.peeking = true;
    acceptor.peek(id, d.peekBytes, d.peekTimeoutMs);
  }

  function peeked(id: number, bytes: Buffer, why: 'data' | 'closed' | 'timeout' | 'limit'): boolean {
    const c = held.get(id);
    if (!c || !c.peeking) return true;
    let result: PeekResult;
    if (why === 'data') {
      result = peekDestination(bytes);
      if (result.kind === 'more') return false;
    } else
      result = {
        kind: 'other',
        why: why === 'closed' ? 'client_closed' : why === 'timeout' ? 'peek_timeout' : 'peek_limit',
      };
    c.peeking = false;
    decide(c, bytes, result).then(
      () => {},
      (err: Error) => {
        d.onError(err, { uid: c.e.uid, stage: 'handle' });
        if (held.has(c.id)) {
          d.forget.resetFd(unhold(c), 'reply', c.e.uid);
          c.out();
        }
      },
    );
    return true;
  }

  function acceptError(tag: number, errno: number, refused: number): void {
    const e = tags.get(tag);
    const code = errnoName(errno);
    const what = refused > 0 ? `accept: ${code} (${refused} refused)` : `accept: ${code}`;
    // One call per refused connection, so the rate-limited log's suppressed count is a count of connections.
    for (let i = 0; i < Math.max(1, refused); i++)
      d.onError(Object.assign(new Error(what), { code }), { uid: e?.uid ?? -1, stage: 'accept' });
  }

  /**
   * A peeked connection: a TLS ClientHello decided here and spliced natively; anything else (plain HTTP, another
   * protocol, an ask, shadow mode) goes on as a net.Socket through afterPeek, the same code the stream path runs.
   */
  async function decide(c: NativeConn<P>, bytes: Buffer, result: PeekResult): Promise<void> {
    const { e } = c;
    const arrival = c.arrival!;
    const { ip, dst, bare } = arrival;
    const slow = async () => {
      const sock = socketOf(e, unhold(c, bytes.length), c.out, true);
      await d.afterPeek(e, sock, arrival, null, bytes, result);
      setupDone(c);
    };
    if (result.kind !== 'tls' || d.shadow(e)) return slow();
    const domain = result.sni;
    if (result.ech && e.ech === 'refuse')
      return refuseHeld(c, { reason: 'ech_refused', subject: { domain, ip, port: dst.port, ech: true }, rule: null });
    const subject: NetworkSubject = { domain: domain ?? bare.domain, ip, port: dst.port };
    const verdict = d.judge(e, subject);
    if (verdict.action === 'ask' || verdict.wouldBlock) return slow();
    if (verdict.action === 'block') return refuseHeld(c, { reason: verdict.reason, subject, rule: verdict.rule });
    const to = await d.destination(e, domain, subject, verdict);
    if (!held.has(c.id)) return; // its subject closed meanwhile (and reset it)
    if ('refusal' in to) return refuseHeld(c, to.refusal);
    const target = to.target;
    d.log.write({
      uid: e.uid,
      surface: 'network',
      action: logAction(verdict),
      reason: verdict.reason,
      subject: { ...subject, ...(result.ech ? { ech: true } : {}), ...(target === ip ? {} : { upstream: target }) },
      rule: verdict.rule,
    });
    // The peeked bytes are still in the socket: the pump sends them first.
    const fd = unhold(c);
    if (!d.relay.spliceFd(e, fd, target, dst.port, c.out))
      d.relay.start(e, socketOf(e, fd, c.out, false), target, dst.port, Buffer.alloc(0));
    setupDone(c);
  }

  return {
    open(e) {
      for (const host of d.hosts) {
        const tag = ++nextTag;
        tags.set(tag, e);
        try {
          // The kernel's cap (net.core.somaxconn, 4096 by default): a burst of thousands of connects waits in the
          // accept queue instead of having its SYNs dropped (a second's retransmit each).
          e.listenIds.push(acceptor.listen(host, e.port, 4096, tag));
        } catch (err) {
          tags.delete(tag);
          // A host with IPv6 disabled has no ::1 (and no IPv6 connection to redirect): IPv4 alone is complete.
          const code = (err as NodeJS.ErrnoException).code;
          if (net.isIPv6(host) && (code === 'EADDRNOTAVAIL' || code === 'EAFNOSUPPORT')) {
            d.onError(err as Error, { uid: e.uid, stage: 'listen_ipv6' });
            continue;
          }
          throw err;
        }
      }
    },
    close(e) {
      for (const lid of e.listenIds) acceptor.unlisten(lid);
      e.listenIds = [];
      for (const [tag, te] of tags) if (te === e) tags.delete(tag);
      for (const id of [...e.held]) {
        const c = held.get(id);
        if (!c) continue;
        d.forget.resetFd(unhold(c), 'reply', e.uid);
        c.out();
      }
    },
    closeAll() {
      acceptor.close();
    },
  };
}

const ERRNO_NAMES = new Map(Object.entries(os.constants.errno).map(([k, v]) => [v, k]));
function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}
