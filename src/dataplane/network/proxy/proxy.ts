import net from 'node:net';
import type { FailMode, NetworkSubject, Reason, Verdict } from '../../../engine/types.js';
import { logAction } from '../../../engine/decide.js';
import type { PROXY_REASONS } from '../../../errors.js';
import type { DecisionRecord, DecisionWriter } from '../../../log/decisions.js';
import { loadNative, type NativeAddon, type OriginalDst } from '../../../native.js';
import { startSettler } from './settle.js';
import { PROXY_PORT_MAX, PROXY_PORT_MIN } from '../nft/render.js';
import { PEEK_MAX_BYTES, PEEK_TIMEOUT_MS, peekSocket, type PeekResult } from './peek.js';
import { createListenerTable } from '../listeners.js';
import { HttpRequestGate } from './http-gate.js';
import { createRelay } from './relay.js';
import { createHeldPath, type Arrival, type Arrived, type ProxyEntry, type Refusal } from './held.js';
import { createForgetter } from './forget.js';
import { createNameResolver, ownAddresses, plainIp, type Resolved } from './resolve.js';
import { approvalOf, type Asker, type AskOutcome } from '../../../engine/approval.js';

/**
 * The transparent proxy: one listener per subject (on 127.0.0.1 and ::1, where `redirect` sends IPv4 and IPv6),
 * so the port a connection arrives on names the subject — no pid lookup. Each connection: read the original
 * destination, peek the SNI/Host, ask the engine, then either splice to the real destination or reset.
 */

/** The engine's decide, narrowed to the network surface; `P` is the compiled policy type. */
export type NetworkDecide<P> = (surface: 'network', subject: NetworkSubject, policy: P | null) => Verdict;

export interface ErrorContext {
  uid: number;
  stage: string;
  /** Calls like this one held back in the window that just ended. */
  suppressed?: number;
}

export const DEFAULT_MAX_CONNECTIONS = 16384;
export const DEFAULT_MAX_PER_SUBJECT = 8192;

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

/** An `ask` verdict: the connection is held (paused, nothing upstream) until the queue answers. */
async function holdConnection(
  ask: Asker | undefined,
  uid: number,
  sock: net.Socket,
  subject: NetworkSubject,
  v: Verdict,
): Promise<{ verdict: Verdict; approval: DecisionRecord['approval'] }> {
  const o = await askFor(ask, uid, sock, subject, v);
  // The outcome decides as a verdict of the ask entry: an allow is relayed like any allow, a block reset.
  return {
    verdict: { action: o.action, reason: o.reason as Reason, source: 'ask', rule: v.rule },
    approval: approvalOf(o),
  };
}

async function askFor(
  ask: Asker | undefined,
  uid: number,
  sock: net.Socket,
  subject: NetworkSubject,
  v: Verdict,
): Promise<AskOutcome> {
  if (!ask) return { action: 'block', reason: 'approval_unavailable', request: null };
  const ac = new AbortController();
  const gone = () => ac.abort();
  sock.once('close', gone);
  const ip = subject.ip ?? '';
  const key = `${subject.domain ?? (net.isIPv6(ip) ? `[${ip}]` : ip)}:${subject.port}`;
  try {
    return await ask({
      uid,
      surface: 'network',
      what: { domain: subject.domain ?? null, ip: subject.ip ?? null, port: subject.port },
      rule: v.rule,
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

/** Reason codes the proxy writes itself (catalogued in src/errors.ts PROXY_REASONS, documented in docs/errors.md). */
export type ProxyReason = keyof typeof PROXY_REASONS;

export interface ProxySubject<P> {
  uid: number;
  port: number;
  /** The subject's compiled policy; null = no resolved policy: the listener stays open and refuses everything. */
  policy: P | null;
  /**
   * `network.ech`: refuse (default) resets a ClientHello carrying encrypted_client_hello, whose outer name says
   * nothing of the real destination; allow judges it by that outer name.
   */
  ech?: 'refuse' | 'allow';
}

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
   * The fail_mode a listener without a policy answers under, read at each connection (the service: the floor's
   * fail_mode as it is now). closed (default): reset `no_policy`; open: allowed to the original destination.
   */
  failMode?: () => FailMode;
  /**
   * The approvals queue (docs/approvals.md): a connection the engine answers `ask` is held, nothing sent upstream,
   * until an approver decides or the deadline passes. Absent: an ask is refused at once (`approval_unavailable`).
   */
  ask?: Asker;
  /** Give memory back after a load peak (default true; see settle.ts). */
  settle?: boolean;
  /**
   * Accept and peek in native code on Node's loop (native/proxy/acceptor.cc), handing a decided TLS connection straight
   * to the splice pump with no net.Socket (default true when the addon has it and splice is on); the cases that need JavaScript's streams (plain HTTP, asks, address-decided early connects,
   * shadow mode) are handed to a net.Socket on the same descriptor.
   */
  nativeAccept?: boolean;
}

export interface Proxy<P> {
  /** Opens the subject's listeners if new, and swaps its policy (new connections see the new one). */
  setSubject(s: ProxySubject<P>): Promise<void>;
  /** Closes a subject's listeners. */
  removeSubject(uid: number): Promise<void>;
  /** uid -> port of every open subject. */
  ports(): Map<number, number>;
  close(): Promise<void>;
}

type Entry<P> = ProxyEntry<P>;

/** True when the entry that decided is an address rule (IP, CIDR, ip:port, [v6]:port) rather than a name. */
export function isAddressRule(rule: string | null): boolean {
  if (!rule) return false;
  if (rule.startsWith('[')) return true;
  const host = rule.includes('/') ? rule.slice(0, rule.indexOf('/')) : rule;
  if (net.isIP(host)) return true;
  const m = /^(.*):(\d+)$/.exec(host);
  return !!m && net.isIPv4(m[1]!);
}

/**
 * A destination on this host, whatever it is called (already plain: no ::ffff: prefix): 127.0.0.0/8 and ::1,
 * the unspecified 0.0.0.0 and :: (a connect there reaches a local service), and the host's own interface
 * addresses. All are judged as `localhost`: a local service is not reached under another name.
 */
export function isLoopback(ip: string): boolean {
  return ip.startsWith('127.') || ip === '::1' || ip === '0.0.0.0' || ip === '::' || ownAddresses().has(ip);
}

/** `localhost` and names under it (RFC 6761): always loopback, never asked of a resolver. */
function isLocalhostName(name: string): boolean {
  return name === 'localhost' || name.endsWith('.localhost');
}

const LOCALHOST: Resolved = { v4: ['127.0.0.1'], v6: ['::1'], expires: 0 };

/**
 * Where a name-decided connection goes: `ip` (the address asked for) when the name resolves there, else the first
 * resolved address of the same family (or any); null when the name resolves to nothing. An address the subject's
 * own answers gave for this name (`told`) counts as resolved; `localhost` names are loopback, never asked.
 */
async function resolveTarget(
  ip: string,
  domain: string,
  told: string[],
  resolve: (name: string) => Promise<Resolved>,
): Promise<string | null> {
  let r: Resolved;
  try {
    r = told.includes(ip)
      ? { v4: [ip], v6: [], expires: 0 }
      : isLocalhostName(domain)
        ? LOCALHOST
        : await resolve(domain);
  } catch {
    r = { v4: [], v6: [], expires: 0 };
  }
  const all = [...r.v4, ...r.v6];
  if (all.includes(ip)) return ip;
  return (net.isIPv4(ip) ? r.v4 : r.v6)[0] ?? all[0] ?? null;
}

/** An entry naming localhost (`localhost`, `localhost:3000`): on a loopback destination it decides by address. */
function isLocalhostRule(rule: string): boolean {
  return /^localhost(:\d+)?$/i.test(rule);
}

function fdOf(s: net.Socket): number {
  return (s as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
}

/**
 * Where a connection was going, when it provably came through the redirect (its original destination), or the
 * refusal a connection that did not gets (no_original_dst, not_redirected: no policy is consulted for it).
 */
function redirectedDestination(
  fd: number,
  local: { address: string; port: number },
  peer: string,
  originalDst: (fd: number) => OriginalDst,
  isListenerAddress: (dst: OriginalDst) => boolean,
  read?: OriginalDst | { error: string },
):
  | { dst: OriginalDst; ip: string; isLoop: boolean }
  | { refusal: { reason: 'no_original_dst' | 'not_redirected'; subject: object; rule: null; severity: 'critical' } } {
  let dst: OriginalDst;
  try {
    if (read === undefined) dst = originalDst(fd);
    else if ('error' in read) throw Object.assign(new Error(`getsockopt: ${read.error}`), { code: read.error });
    else dst = read;
  } catch (err) {
    // Not provably redirected: the same answer as a direct connection, with no policy consulted.
    return {
      refusal: {
        reason: 'no_original_dst',
        subject: { peer, listener: `${plainIp(local.address)}:${local.port}`, error: (err as { code?: string }).code },
        rule: null,
        severity: 'critical',
      },
    };
  }
  const ip = plainIp(dst.address);
  const isLoop = isLoopback(ip);
  if (
    (plainIp(local.address) === ip && local.port === dst.port) ||
    isListenerAddress(dst) ||
    (isLoop && dst.port >= PROXY_PORT_MIN && dst.port <= PROXY_PORT_MAX)
  ) {
    // A direct connection to a listener (own or another subject's): judging it would let one agent borrow
    // another's egress policy by guessing a port.
    return {
      refusal: { reason: 'not_redirected', subject: { ip, port: dst.port, peer }, rule: null, severity: 'critical' },
    };
  }
  return { dst, ip, isLoop };
}

/**
 * Where an allowed connection goes: the address asked for, unless a name entry decided. Then it goes where the name
 * resolves (through our resolvers, or as the subject's own DNS answers said), never to the address the agent
 * supplied, so a forged SNI/Host cannot carry an allowed name to an arbitrary address; and that address is judged
 * again: a deny entry covering it wins, and a name never leads into a local or internal address no entry names
 * (`rebind`). A mode default (blacklist, nothing denied) judged the address as well as the name: it goes there.
 */
async function nameDestination<P>(
  d: {
    resolve: (name: string) => Promise<Resolved>;
    seen: ProxyOptions<P>['seen'];
    judge: (e: Entry<P>, s: NetworkSubject) => Verdict;
    log: DecisionWriter;
  },
  e: Entry<P>,
  domain: string | null,
  subject: NetworkSubject,
  verdict: Verdict,
): Promise<{ target: string } | { refusal: Refusal }> {
  const ip = subject.ip!;
  if (!domain || verdict.rule === null || isAddressRule(verdict.rule)) return { target: ip };
  const to = await resolveTarget(ip, domain, d.seen?.(e.uid, domain) ?? [], d.resolve);
  if (to === null) return { refusal: { reason: 'resolve_failed', subject, rule: verdict.rule } };
  const again = d.judge(e, { domain, ip: to, port: subject.port, resolved: { own: ownAddresses().has(to) } });
  const upstream = { ...subject, upstream: to };
  if (again.action === 'block') return { refusal: { reason: again.reason, subject: upstream, rule: again.rule } };
  if (again.wouldBlock)
    d.log.write({
      uid: e.uid,
      surface: 'network',
      action: 'would_block',
      reason: again.reason,
      subject: upstream,
      rule: again.rule,
    });
  return { target: to };
}

/** Creates the proxy. No listener opens until `setSubject`. */
export function createProxy<P>(opts: ProxyOptions<P>): Proxy<P> {
  const hosts = opts.hosts ?? ['127.0.0.1', '::1'];
  const originalDst = opts.originalDst ?? ((fd: number) => loadNative().originalDst(fd));
  const peekBytes = opts.peekBytes ?? PEEK_MAX_BYTES;
  const peekTimeout = opts.peekTimeoutMs ?? PEEK_TIMEOUT_MS;
  const onError = rateLimitErrors(opts.onError ?? (() => {}), opts.errorWindowMs ?? 10_000);
  // After a burst, memory goes back once the connections have (see settle.ts).
  const caps = createCaps(opts.maxConnections, opts.maxPerSubject, onError);
  const admit = caps.admit;
  const stopSettler = opts.settle === false ? () => {} : startSettler(caps);
  const failMode = opts.failMode ?? (() => 'closed' as const);
  const table = createListenerTable<Entry<P>, ProxySubject<P>>({
    create: (s) => ({
      uid: s.uid,
      port: s.port,
      policy: s.policy,
      ech: s.ech ?? 'refuse',
      active: 0,
      servers: [],
      listenIds: [],
      held: new Set(),
      sockets: new Set(),
      spliced: new Set(),
    }),
    update: (cur, s) => {
      cur.policy = s.policy;
      cur.ech = s.ech ?? 'refuse';
    },
    open,
    close: closeEntry,
  });
  const subjects = table.entries;
  const resolve = createNameResolver(opts.resolvers, opts.resolve);
  const forget = createForgetter(onError);
  const relay = createRelay({
    splice: opts.splice !== false,
    connectTimeoutMs: opts.connectTimeoutMs ?? 10_000,
    onError,
    forget,
  });

  const Acceptor = nativeAcceptor(opts);
  const native = Acceptor
    ? createHeldPath<P>({
        Acceptor,
        hosts,
        peekBytes,
        peekTimeoutMs: peekTimeout,
        log: opts.log,
        onError,
        ...(opts.onSetup ? { onSetup: opts.onSetup } : {}),
        forget,
        relay,
        admit,
        arrive,
        handle,
        afterPeek,
        judge,
        shadow: (e) => isShadow(e.policy),
        destination,
      })
    : null;

  /** Every address:port this proxy listens on: a connection whose original destination is one of them was not redirected. */
  function isListenerAddress(dst: OriginalDst): boolean {
    const ip = plainIp(dst.address);
    for (const e of subjects.values()) if (e.port === dst.port && hosts.some((h) => plainIp(h) === ip)) return true;
    return false;
  }

  function refuse(e: Entry<P>, sock: net.Socket, rec: Refusal): void {
    opts.log.write({ uid: e.uid, surface: 'network', action: 'block', ...rec });
    forget.reset(sock, 'reply', e.uid);
  }

  function judge(e: Entry<P>, subject: NetworkSubject): Verdict {
    return judgeEntry(opts.decide, failMode, e.policy, subject);
  }

  function destination(e: Entry<P>, domain: string | null, subject: NetworkSubject, verdict: Verdict) {
    return nameDestination({ resolve, seen: opts.seen, judge, log: opts.log }, e, domain, subject, verdict);
  }

  /** Where a connection was going, and what its address alone decides (a refusal, or whether to connect at once). */
  function arrive(
    e: Entry<P>,
    fd: number,
    local: { address: string; port: number },
    peer: { address: string; port: number },
    read?: OriginalDst | { error: string },
  ): Arrived {
    // What the native acceptor read is used unless the caller supplied its own originalDst (tests do).
    const r = redirectedDestination(
      fd,
      local,
      `${plainIp(peer.address)}:${peer.port}`,
      originalDst,
      isListenerAddress,
      opts.originalDst ? undefined : read,
    );
    if ('refusal' in r) return { refusal: r.refusal };
    return earlyVerdict(r, (bare) => judge(e, bare));
  }

  async function handle(e: Entry<P>, sock: net.Socket): Promise<void> {
    sock.on('error', () => {});
    const a = arrive(
      e,
      fdOf(sock),
      { address: sock.localAddress ?? '', port: sock.localPort ?? 0 },
      { address: sock.remoteAddress ?? '', port: sock.remotePort ?? 0 },
    );
    if ('refusal' in a) {
      refuse(e, sock, a.refusal);
      return;
    }
    const { arrival, byAddress } = a;
    const up = byAddress ? relay.connect(e, sock, arrival.ip, arrival.dst.port) : null;
    const { bytes, result } = await peekSocket(sock, peekBytes, peekTimeout);
    return afterPeek(e, sock, arrival, up, bytes, result);
  }

  /** What a connection's first bytes decide (its destination and early verdict already known). */
  async function afterPeek(
    e: Entry<P>,
    sock: net.Socket,
    ctx: Arrival,
    up: net.Socket | null,
    bytes: Buffer,
    result: PeekResult,
  ): Promise<void> {
    const { dst, ip, bare, early } = ctx;
    if (sock.destroyed) {
      // Gone before naming anything; an early-connected one was allowed (and used): its line is still written.
      if (up) {
        opts.log.write({
          uid: e.uid,
          surface: 'network',
          action: 'allow',
          reason: early.reason,
          subject: bare,
          rule: early.rule,
        });
        up.destroy();
      }
      return;
    }
    const drop = (rec: Parameters<typeof refuse>[2]) => {
      if (up) forget.reset(up, 'orig', e.uid);
      refuse(e, sock, rec);
    };
    let domain: string | null = null;
    if (result.kind === 'tls') {
      domain = result.sni;
      if (result.ech && e.ech === 'refuse') {
        const subject = { domain, ip, port: dst.port, ech: true };
        if (!isShadow(e.policy)) return drop({ reason: 'ech_refused', subject, rule: null });
        opts.log.write({
          uid: e.uid,
          surface: 'network',
          action: 'would_block',
          reason: 'ech_refused',
          subject,
          rule: null,
        });
      }
    } else if (result.kind === 'http') {
      if (result.conflict) {
        drop({ reason: 'ambiguous_host', subject: { domain: result.host, ip, port: dst.port }, rule: null });
        return;
      }
      domain = result.host;
    }
    const subject: NetworkSubject = { domain: domain ?? bare.domain, ip, port: dst.port };
    const ech = result.kind === 'tls' && result.ech ? { ech: true } : {};
    const httpHost = result.kind === 'http' ? result.host : undefined;
    let approval: DecisionRecord['approval'];
    const allowAndRelay = (target: string, verdict: Verdict, upstream: net.Socket | null) => {
      opts.log.write({
        uid: e.uid,
        surface: 'network',
        action: logAction(verdict),
        reason: verdict.reason,
        subject: { ...subject, ...ech, ...(target === ip ? {} : { upstream: target }) },
        rule: verdict.rule,
        ...(approval ? { approval } : {}),
      });
      const u = upstream ?? relay.connect(e, sock, target, dst.port);
      if (httpHost !== undefined) {
        const gate = new HttpRequestGate(httpHost);
        relay.http(e, sock, u, bytes, gate, (r) =>
          opts.log.write({
            uid: e.uid,
            surface: 'network',
            action: 'block',
            reason: r.reason,
            subject: {
              domain: r.reason === 'http_host_changed' ? r.host : httpHost,
              ip,
              port: dst.port,
              request: gate.count + 1,
              ...(r.reason === 'http_malformed' ? { why: r.why } : {}),
            },
            rule: null,
          }),
        );
      } else relay.splice(e, sock, u, bytes);
    };

    // Connected by address already: a name can only add a deny, or (a blacklist's ask entry) a question, for which
    // that upstream (nothing sent on it) is dropped and a fresh one made if it is approved.
    let verdict = up && domain === null ? early : judge(e, subject);
    if (up && verdict.action === 'block' && verdict.reason === 'deny_entry')
      return drop({ reason: verdict.reason, subject, rule: verdict.rule });
    if (up && verdict.action !== 'ask') return allowAndRelay(ip, early, up);
    if (up) forget.reset(up, 'orig', e.uid);
    if (verdict.action === 'ask')
      ({ verdict, approval } = await holdConnection(opts.ask, e.uid, sock, subject, verdict));
    if (verdict.action === 'block') {
      refuse(e, sock, { reason: verdict.reason, subject, rule: verdict.rule, ...(approval ? { approval } : {}) });
      return;
    }

    // A shadowed block goes where the agent asked: no entry allowed the name, so no resolution vouches for it.
    const to = verdict.wouldBlock ? { target: ip } : await destination(e, domain, subject, verdict);
    if ('refusal' in to) {
      refuse(e, sock, { ...to.refusal, ...(approval ? { approval } : {}) });
      return;
    }
    const target = to.target;
    if (sock.destroyed) return;
    allowAndRelay(target, verdict, null);
  }

  async function open(e: Entry<P>): Promise<void> {
    if (native) return native.open(e);
    for (const host of hosts) {
      const srv = net.createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, (sock) => {
        sock.on('error', () => {});
        const out = admit(e);
        if (!out) return forget.reset(sock, 'reply', e.uid);
        e.sockets.add(sock);
        sock.on('close', () => {
          out();
          e.sockets.delete(sock);
        });
        const t0 = opts.onSetup ? performance.now() : 0;
        handle(e, sock).then(
          () => opts.onSetup?.((performance.now() - t0) / 1000),
          (err: Error) => {
            onError(err, { uid: e.uid, stage: 'handle' });
            forget.reset(sock, 'reply', e.uid);
          },
        );
      });
      if (!(await listenOn(srv, host, e.port, (err) => onError(err, { uid: e.uid, stage: 'listen_ipv6' })))) continue;
      // After listen: an accept that fails (EMFILE, ENFILE, ENOMEM) is that connection's failure, logged
      // rate-limited; an unhandled 'error' would end the service (libuv keeps accepting once descriptors free).
      srv.on('error', (err) => onError(err, { uid: e.uid, stage: 'accept' }));
      e.servers.push(srv);
    }
  }

  async function closeEntry(e: Entry<P>): Promise<void> {
    const closing = e.servers.map((s) => new Promise<void>((r) => s.close(() => r())));
    native?.close(e);
    relay.end(e);
    await Promise.all(closing);
  }

  return {
    setSubject: (s) => table.set(s),
    removeSubject: (uid) => table.remove(uid),
    ports() {
      return new Map([...subjects.values()].map((e) => [e.uid, e.port]));
    },
    async close() {
      stopSettler();
      const all = [...subjects.values()];
      subjects.clear();
      await Promise.all(all.map(closeEntry));
      native?.closeAll();
      await relay.close();
    },
  };
}

/** Shadow mode on a subject's policy (the engine's CompiledPolicy carries it; any other policy type is enforced). */
function isShadow(p: unknown): boolean {
  return typeof p === 'object' && p !== null && (p as { shadow?: unknown }).shadow === true;
}

/**
 * A listener without a resolved policy refuses everything (or, under fail_mode open, lets it through to the address
 * asked for); it never borrows a default or another subject's policy. A decide that throws is `engine_error`.
 */
function judgeEntry<P>(
  decide: NetworkDecide<P>,
  failMode: () => FailMode,
  policy: P | null,
  subject: NetworkSubject,
): Verdict {
  if (policy === null) {
    const open = failMode() === 'open';
    return { action: open ? 'allow' : 'block', reason: 'no_policy', source: 'fail_mode', rule: null };
  }
  try {
    return decide('network', subject, policy);
  } catch {
    return { action: 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
  }
}

/** The connection caps, total and per subject, and the counts the settler reads. */
function createCaps(
  maxTotal = DEFAULT_MAX_CONNECTIONS,
  maxPerSubject = DEFAULT_MAX_PER_SUBJECT,
  onError: (err: Error, ctx: ErrorContext) => void,
): { admit(e: { uid: number; active: number }): (() => void) | null; active(): number; opened(): number } {
  let active = 0;
  let opened = 0;
  return {
    active: () => active,
    opened: () => opened,
    /** Counts a connection in: its count-out (once, whichever way it ends), or null when over a cap (logged). */
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

/** The addon's native acceptor when it is to be used (see ProxyOptions.nativeAccept), else null. */
function nativeAcceptor(opts: { nativeAccept?: boolean; splice?: boolean }): NativeAddon['Acceptor'] | null {
  if (opts.nativeAccept === false || opts.splice === false) return null;
  try {
    const n = loadNative();
    return n.Acceptor && n.resetClose ? n.Acceptor : null;
  } catch {
    return null;
  }
}

/**
 * What a redirected connection's address alone decides. First the address (a loopback address is also the name
 * `localhost`): when that already allows, the name cannot widen it, so the upstream is connected at once and a
 * server that speaks first (SSH, SMTP, a database) gets its banner through without waiting for the peek. The peek
 * still runs, for deny entries on a name, ECH, and the plain-HTTP gate.
 */
function earlyVerdict(
  r: { dst: OriginalDst; ip: string; isLoop: boolean },
  judge: (bare: NetworkSubject) => Verdict,
): Arrived {
  const { dst, ip, isLoop } = r;
  const bare: NetworkSubject = { domain: isLoop ? 'localhost' : null, ip, port: dst.port };
  const early = judge(bare);
  // A loopback destination is judged as localhost and its address only: a name the agent sends cannot carry it
  // anywhere else, so a refusal needs no peek either.
  if (early.action === 'block' && (isLoop || early.reason === 'deny_entry' || early.reason === 'no_policy'))
    return { refusal: { reason: early.reason, subject: bare, rule: early.rule } };
  // A shadowed block is never connected early: the name may still allow it for real (and log it so).
  const byAddress =
    early.action === 'allow' &&
    !early.wouldBlock &&
    (early.rule === null || isAddressRule(early.rule) || (isLoop && isLocalhostRule(early.rule)));
  return { arrival: { dst, ip, isLoop, bare, early }, byAddress };
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
