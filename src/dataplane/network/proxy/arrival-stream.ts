/**
 * The stream way in: a connection as a net.Socket (a net.Server's listener without the addon's acceptor, or a
 * connection the native way in hands over because it needs streams: an upstream connected by address at once, an
 * ask, the plain-HTTP request gate). Peeks by stream, asks verdict.ts, then relays.
 */
import net from 'node:net';
import type { AskOutcome } from '../../../engine/approval.js';
import type { OriginalDst } from '../../../native.js';
import { markServer } from '../mark.js';
import { HttpRequestGate } from './http-gate.js';
import { peekSocket } from './peek.js';
import { ownAddresses } from './resolve.js';
import { destination, isListener, subjectPolicy, writeLines, type ProxyEntry, type ProxyState } from './state.js';
import {
  arrivalVerdict,
  askedVerdict,
  gateRefusalLine,
  peekVerdict,
  type Allowed,
  type Arrival,
  type Line,
  type PeekAction,
  type Refusal,
} from './verdict.js';

/** Opens an entry's listeners as net.Servers. */
export async function openStreamListeners<P>(st: ProxyState<P>, e: ProxyEntry<P>): Promise<void> {
  for (const host of st.hosts) {
    const srv = net.createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, (sock) => {
      sock.on('error', () => {});
      const out = st.caps.admit(e);
      if (!out) return st.forget.reset(sock, 'reply', e.uid);
      e.sockets.add(sock);
      sock.on('close', () => {
        out();
        e.sockets.delete(sock);
      });
      const t0 = st.opts.onSetup ? performance.now() : 0;
      arrive(st, e, sock).then(
        () => st.opts.onSetup?.((performance.now() - t0) / 1000),
        (err: Error) => {
          st.onError(err, { uid: e.uid, stage: 'handle' });
          st.forget.reset(sock, 'reply', e.uid);
        },
      );
    });
    if (!(await listenOn(srv, host, e.port, (err) => st.onError(err, { uid: e.uid, stage: 'listen_ipv6' })))) continue;
    // After listen: an accept that fails (EMFILE, ENFILE, ENOMEM) is that connection's failure, logged
    // rate-limited; an unhandled 'error' would end the service (libuv keeps accepting once descriptors free).
    srv.on('error', (err) => st.onError(err, { uid: e.uid, stage: 'accept' }));
    e.servers.push(srv);
  }
}

/** SO_ORIGINAL_DST of a descriptor, or the errno name reading it failed with. */
export function readDst(read: (fd: number) => OriginalDst, fd: number): OriginalDst | { error: string | undefined } {
  try {
    return read(fd);
  } catch (err) {
    return { error: (err as { code?: string }).code };
  }
}

async function arrive<P>(st: ProxyState<P>, e: ProxyEntry<P>, sock: net.Socket): Promise<void> {
  sock.on('error', () => {});
  const a = arrivalVerdict(subjectPolicy(st, e), {
    dst: readDst(st.originalDst, fdOf(sock)),
    local: { address: sock.localAddress ?? '', port: sock.localPort ?? 0 },
    peer: { address: sock.remoteAddress ?? '', port: sock.remotePort ?? 0 },
    isListener: (dst) => isListener(st, dst),
    own: ownAddresses(),
  });
  if ('refusal' in a) return refuse(st, e, sock, a.refusal);
  return streamFrom(st, e, sock, a.arrival, a.byAddress);
}

/** From a judged arrival: connects by address when it allows that, peeks by stream, then acts on the verdict. */
export async function streamFrom<P>(
  st: ProxyState<P>,
  e: ProxyEntry<P>,
  sock: net.Socket,
  arrival: Arrival,
  byAddress: boolean,
): Promise<void> {
  const up = byAddress ? st.relay.connect(e, sock, arrival.ip, arrival.dst.port) : null;
  const { bytes, result } = await peekSocket(sock, st.peekBytes, st.peekTimeoutMs);
  if (sock.destroyed) {
    // Gone before naming anything; an early-connected one was allowed (and used): its line is still written.
    if (up) {
      const { early, bare } = arrival;
      writeLines(st, e, [{ action: 'allow', reason: early.reason, subject: bare, rule: early.rule }]);
      up.destroy();
    }
    return;
  }
  return streamAct(st, e, sock, peekVerdict(subjectPolicy(st, e), arrival, result, up !== null), up, bytes);
}

/**
 * Carries out what a connection's first bytes decided, on a net.Socket: `up` is the upstream connected by address
 * (or null); `bytes` the peeked ones, no longer in the socket, written upstream first.
 */
export async function streamAct<P>(
  st: ProxyState<P>,
  e: ProxyEntry<P>,
  sock: net.Socket,
  action: PeekAction,
  up: net.Socket | null,
  bytes: Buffer,
): Promise<void> {
  writeLines(st, e, action.notes);
  if (up && action.do !== 'early') st.forget.reset(up, 'orig', e.uid);
  if (action.do === 'early') return relay(st, e, sock, action.allow, action.line, up, bytes);
  if (action.do === 'ask') action = askedVerdict(action.allow, await askFor(st, e, sock, action.allow));
  if (action.do === 'refuse') return refuse(st, e, sock, action.line);
  if (action.do !== 'allow') return;
  const to = await destination(st, e, action.allow);
  writeLines(st, e, to.notes);
  if (to.do === 'refuse') return refuse(st, e, sock, to.line);
  if (sock.destroyed) return;
  relay(st, e, sock, action.allow, to.line, null, bytes, to.target);
}

function relay<P>(
  st: ProxyState<P>,
  e: ProxyEntry<P>,
  sock: net.Socket,
  allow: Allowed,
  line: Line,
  upstream: net.Socket | null,
  bytes: Buffer,
  target = allow.subject.ip!,
): void {
  writeLines(st, e, [line]);
  const port = allow.subject.port;
  const u = upstream ?? st.relay.connect(e, sock, target, port);
  if (allow.httpHost === undefined) return st.relay.splice(e, sock, u, bytes);
  const gate = new HttpRequestGate(allow.httpHost);
  st.relay.http(e, sock, u, bytes, gate, (r) => writeLines(st, e, [gateRefusalLine(allow, r, gate.count + 1)]));
}

function refuse<P>(st: ProxyState<P>, e: ProxyEntry<P>, sock: net.Socket, rec: Refusal): void {
  st.opts.log.write({ uid: e.uid, surface: 'network', action: 'block', ...rec });
  st.forget.reset(sock, 'reply', e.uid);
}

/** An `ask` verdict: the connection is held (paused, nothing upstream) until the queue answers. */
async function askFor<P>(st: ProxyState<P>, e: ProxyEntry<P>, sock: net.Socket, a: Allowed): Promise<AskOutcome> {
  const ask = st.opts.ask;
  if (!ask) return { action: 'block', reason: 'approval_unavailable', request: null };
  const { subject } = a;
  const ac = new AbortController();
  const gone = () => ac.abort();
  sock.once('close', gone);
  const ip = subject.ip ?? '';
  const key = `${subject.domain ?? (net.isIPv6(ip) ? `[${ip}]` : ip)}:${subject.port}`;
  try {
    return await ask({
      uid: e.uid,
      surface: 'network',
      what: { domain: subject.domain ?? null, ip: subject.ip ?? null, port: subject.port },
      rule: a.verdict.rule,
      reason: 'ask_entry',
      sessionKey: key,
      persistEntry: key,
      signal: ac.signal,
    });
  } catch {
    return { action: 'block', reason: 'approval_unavailable', request: null };
  } finally {
    sock.off('close', gone);
  }
}

function fdOf(s: net.Socket): number {
  return (s as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
}

/**
 * Listens; false (after telling `skipped`) when the host has IPv6 disabled and this is ::1: no IPv6 connection is
 * redirected there, so IPv4 alone is complete.
 */
async function listenOn(srv: net.Server, host: string, port: number, skipped: (err: Error) => void): Promise<boolean> {
  try {
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      // The kernel's cap (net.core.somaxconn, 4096 by default): a burst of thousands of connects waits in the
      // accept queue instead of having its SYNs dropped (a second's retransmit each).
      srv.listen({ host, port, exclusive: true, backlog: 4096 }, () => {
        srv.off('error', reject);
        resolve();
      });
    });
    try {
      markServer(srv);
    } catch (err) {
      srv.close();
      throw err;
    }
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (net.isIPv6(host) && (code === 'EADDRNOTAVAIL' || code === 'EAFNOSUPPORT')) {
      skipped(err as Error);
      return false;
    }
    throw err;
  }
}
