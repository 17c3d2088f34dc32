import net from 'node:net';
import os from 'node:os';
import type { NativeProxyPart } from '../addon.js';
import { LISTENER_MARK } from '../ports.js';
import { peekDestination, type PeekResult } from './peek.js';
import { ownAddresses } from './resolve.js';
import { readDst, streamAct, streamFrom } from './arrival-stream.js';
import { destination, isListener, subjectPolicy, writeLines, type ProxyEntry, type ProxyState } from './state.js';
import { createFastPath } from './arrival-fast.js';
import { arrivalVerdict, peekVerdict, type Arrival, type Refusal } from './verdict.js';

/**
 * The native way in (native/proxy/acceptor.cc): listeners, accept and peek in native code on Node's loop, so a
 * connection is decided from its peeked bytes and handed straight to the splice pump with no net.Socket, no stream
 * and no read into JavaScript. Measured in the lab (bench/proxy), that took the proxy's CPU per new TLS connection
 * from ~800 us to ~370 us. What needs JavaScript's streams (an upstream connected by address at once, an ask, the
 * plain-HTTP request gate) goes on as a net.Socket on the same descriptor (arrival-stream.ts).
 */

export type NativeArrival<P> = ReturnType<typeof createNativeArrival<P>>;

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

export function createNativeArrival<P>(st: ProxyState<P>, Acceptor: NonNullable<NativeProxyPart['Acceptor']>) {
  const held = new Map<number, NativeConn<P>>();
  const tags = new Map<number, ProxyEntry<P>>();
  let nextTag = 0;
  const acceptor = new Acceptor({ onAccept: accepted, onPeek: peeked, onError: acceptError });
  // The native verdict path (arrival-fast.ts): what it cannot decide arrives at `accepted` below.
  const fast = createFastPath(st, acceptor);
  const tagsOf = (e: ProxyEntry<P>) => [...tags].filter(([, te]) => te === e).map(([tag]) => tag);

  function unhold(c: NativeConn<P>, consume = 0): number {
    const fd = acceptor.release(c.id, consume);
    held.delete(c.id);
    c.e.held.delete(c.id);
    return fd;
  }

  function setupDone(c: NativeConn<P>): void {
    st.opts.onSetup?.((performance.now() - c.t0) / 1000);
  }

  /** A held connection refused: its line, then a reset (and its conntrack entry deleted). */
  function refuseHeld(c: NativeConn<P>, rec: Refusal): void {
    st.opts.log.write({ uid: c.e.uid, surface: 'network', action: 'block', ...rec });
    st.forget.resetFd(unhold(c), 'reply', c.e.uid);
    c.out();
    setupDone(c);
  }

  /** The connection as a net.Socket of its entry (counted out when it closes), for the stream way to go on. */
  function toSocket(c: NativeConn<P>, consume: number): net.Socket {
    return socketOf(c.e, unhold(c, consume), c.out, true);
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
    const out = st.caps.admit(e);
    if (!out) return void st.forget.resetFd(acceptor.release(id, 0), 'reply', e.uid);
    const c: NativeConn<P> = { id, e, t0: st.opts.onSetup ? performance.now() : 0, arrival: null, out, peeking: false };
    held.set(id, c);
    e.held.add(id);
    const read = dstFamily === 0 ? { error: dstError } : { family: dstFamily, address: dstAddr, port: dstPort };
    const a = arrivalVerdict(subjectPolicy(st, e), {
      // What the acceptor read is used unless the caller supplied its own originalDst (tests do).
      dst: st.dstOverride ? readDst(st.dstOverride, fd) : read,
      local: { address: localAddr, port: localPort },
      peer: { address: peerAddr, port: peerPort },
      isListener: (dst) => isListener(st, dst),
      own: ownAddresses(),
    });
    if ('refusal' in a) return refuseHeld(c, a.refusal);
    if (a.byAddress) {
      // Connected at once by address (a server that speaks first): that needs the stream's early phase.
      const sock = toSocket(c, 0);
      streamFrom(st, e, sock, a.arrival, true).then(
        () => setupDone(c),
        (err: Error) => {
          st.onError(err, { uid: e.uid, stage: 'handle' });
          st.forget.reset(sock, 'reply', e.uid);
        },
      );
      return;
    }
    c.arrival = a.arrival;
    c.peeking = true;
    acceptor.peek(id, st.peekBytes, st.peekTimeoutMs);
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
        st.onError(err, { uid: c.e.uid, stage: 'handle' });
        if (held.has(c.id)) {
          st.forget.resetFd(unhold(c), 'reply', c.e.uid);
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
      st.onError(Object.assign(new Error(what), { code }), { uid: e?.uid ?? -1, stage: 'accept' });
  }

  /**
   * A peeked connection, judged by the same verdict as the stream way: refused or spliced here; an ask or plain
   * HTTP goes on as a net.Socket (the peeked bytes read off: the stream way writes them upstream itself).
   */
  async function decide(c: NativeConn<P>, bytes: Buffer, result: PeekResult): Promise<void> {
    const { e } = c;
    const action = peekVerdict(subjectPolicy(st, e), c.arrival!, result, false);
    if (action.do === 'ask' || (action.do === 'allow' && action.allow.httpHost !== undefined)) {
      await streamAct(st, e, toSocket(c, bytes.length), action, null, bytes);
      return setupDone(c);
    }
    writeLines(st, e, action.notes);
    if (action.do === 'refuse') return refuseHeld(c, action.line);
    if (action.do !== 'allow') return;
    const to = await destination(st, e, action.allow);
    if (!held.has(c.id)) return; // its subject closed meanwhile (and reset it)
    writeLines(st, e, to.notes);
    if (to.do === 'refuse') return refuseHeld(c, to.line);
    writeLines(st, e, [to.line]);
    // The peeked bytes are still in the socket: the pump sends them first.
    const fd = unhold(c);
    const port = action.allow.subject.port;
    if (!st.relay.spliceFd(e, fd, to.target, port, c.out))
      st.relay.start(e, socketOf(e, fd, c.out, false), to.target, port, Buffer.alloc(0));
    setupDone(c);
  }

  return {
    open(e: ProxyEntry<P>): void {
      for (const host of st.hosts) {
        const tag = ++nextTag;
        tags.set(tag, e);
        try {
          // The kernel's cap (net.core.somaxconn, 4096 by default): a burst of thousands of connects waits in the
          // accept queue instead of having its SYNs dropped (a second's retransmit each).
          e.listenIds.push(acceptor.listen(host, e.port, 4096, tag, LISTENER_MARK));
        } catch (err) {
          tags.delete(tag);
          // A host with IPv6 disabled has no ::1 (and no IPv6 connection to redirect): IPv4 alone is complete.
          const code = (err as NodeJS.ErrnoException).code;
          if (net.isIPv6(host) && (code === 'EADDRNOTAVAIL' || code === 'EAFNOSUPPORT')) {
            st.onError(err as Error, { uid: e.uid, stage: 'listen_ipv6' });
            continue;
          }
          throw err;
        }
      }
      fast?.update(e, tagsOf(e));
    },
    /** The entry's policy changed: the native path judges its next connection with the new one. */
    update(e: ProxyEntry<P>): void {
      fast?.update(e, tagsOf(e));
    },
    /** Closes the entry's listeners and resets what it still holds. */
    close(e: ProxyEntry<P>): void {
      for (const lid of e.listenIds) acceptor.unlisten(lid);
      e.listenIds = [];
      fast?.close(e, tagsOf(e));
      for (const [tag, te] of tags) if (te === e) tags.delete(tag);
      for (const id of [...e.held]) {
        const c = held.get(id);
        if (!c) continue;
        st.forget.resetFd(unhold(c), 'reply', e.uid);
        c.out();
      }
    },
    /** Every listener and held connection. */
    closeAll(): void {
      acceptor.close();
      fast?.stop();
    },
  };
}

/** A descriptor as a net.Socket of the entry, counted out when it closes. */
function socketOf<P>(e: ProxyEntry<P>, fd: number, out: () => void, paused: boolean): net.Socket {
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

const ERRNO_NAMES = new Map(Object.entries(os.constants.errno).map(([k, v]) => [v, k]));
function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}
