/**
 * The DNS forwarder: one listener per subject (UDP and TCP on 127.0.0.1 and ::1, the port the subject's nft chain
 * redirects its port-53 traffic to), so the port a query arrives on names the subject, whatever the packet says.
 * Each query is parsed strictly (wire.ts), judged (verdict.ts: the subject's network policy, then the rebind rule on
 * the answer), and either re-built and forwarded to the subject's resolvers (upstream.ts) or answered REFUSED (or
 * NXDOMAIN) with nothing sent anywhere. What the subject's answers said (name -> addresses) is kept for the proxy
 * (`seen`), so a name-decided connection to an address the subject was told is taken as is.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import type { Verdict } from '../../../engine/types.js';
import { nativeProxy } from '../../../native.js';
import type { OriginalDst } from '../addon.js';
import type { DecisionWriter } from '../../../log/decisions.js';
import { createForgetter } from '../proxy/forget.js';
import { ownAddresses, plainIp } from '../proxy/resolve.js';
import { createListenerTable } from '../listeners.js';
import { RCODE, encodeError, parseQuery, readdress, truncatedReply, type Answer, type Query } from './wire.js';
import { createUpstream, parseUpstream, type Upstream } from './upstream.js';
import {
  answerVerdict,
  queryVerdict,
  querySubject,
  tcpArrivalVerdict,
  type DnsAnswerDecide,
  type DnsDecide,
  type DnsPolicy,
  type Line,
  type Transport,
} from './verdict.js';

export type { DnsAnswerDecide, DnsDecide } from './verdict.js';

export interface DnsSubject<P> {
  uid: number;
  port: number;
  policy: P | null;
  /** Where this subject's allowed queries go (IP literals, optionally `ip:port` / `[v6]:port`). */
  resolvers: string[];
}

export interface DnsForwarderOptions<P> {
  decide: DnsDecide<P>;
  /**
   * Judges each address of an answer to a query an entry allowed: a name never leads into a local or internal
   * address no entry names (dnsmasq's stop-dns-rebind); such an answer is refused whole (`rebind`). Absent: none.
   */
  decideAnswer?: DnsAnswerDecide<P>;
  log: DecisionWriter;
  /**
   * What a subject without a policy gets until setFailMode says otherwise: closed (default) refuses with no_policy,
   * open forwards (still logged).
   */
  failMode?: 'closed' | 'open';
  /** What a refused name gets: REFUSED (default) or NXDOMAIN. */
  refuse?: 'refused' | 'nxdomain';
  /** Each UDP query's time from receipt to answer, in seconds: the metrics. */
  onAnswer?: (seconds: number) => void;
  /** Listen addresses (default 127.0.0.1 and ::1). */
  hosts?: string[];
  /** Upstream time-out per attempt (ms; default 2000). Each resolver is tried once, in order. */
  timeoutMs?: number;
  /** Allow lines written per subject per second; the rest are counted into the next one (`suppressed`). */
  allowLinesPerSec?: number;
  /** Reads SO_ORIGINAL_DST of a TCP connection (default: the addon). */
  originalDst?: (fd: number) => OriginalDst;
  onError?: (err: Error, ctx: { uid: number; stage: string }) => void;
}

export interface DnsForwarder<P> {
  setSubject(s: DnsSubject<P>): Promise<void>;
  removeSubject(uid: number): Promise<void>;
  /** Addresses this subject's own answers gave for `name` (lower case, unexpired). */
  seen(uid: number, name: string): string[];
  /** What a subject without a policy gets from the next query on. */
  setFailMode(m: 'closed' | 'open'): void;
  close(): Promise<void>;
}

interface Entry<P> {
  uid: number;
  port: number;
  policy: P | null;
  upstreams: Upstream[];
  udp: dgram.Socket[];
  tcp: net.Server[];
  sockets: Set<net.Socket>;
  /** name -> address -> expiry (ms). */
  seen: Map<string, Map<string, number>>;
  lines: { second: number; count: number; suppressed: number };
}

/** Names kept per subject for the proxy; the oldest goes first when full. */
const SEEN_MAX = 4096;
const SEEN_TTL_MIN_S = 60;
const SEEN_TTL_MAX_S = 3600;
const TCP_IDLE_MS = 10_000;

function fdOf(s: net.Socket): number {
  return (s as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
}

/** Creates the forwarder; no listener opens until setSubject. */
export function createDnsForwarder<P>(opts: DnsForwarderOptions<P>): DnsForwarder<P> {
  const hosts = opts.hosts ?? ['127.0.0.1', '::1'];
  const refuseRcode = opts.refuse === 'nxdomain' ? RCODE.NXDOMAIN : RCODE.REFUSED;
  const allowPerSec = opts.allowLinesPerSec ?? 100;
  const onError = opts.onError ?? (() => {});
  const originalDst = opts.originalDst ?? ((fd: number) => nativeProxy().originalDst(fd));
  const table = createListenerTable<Entry<P>, DnsSubject<P>>({
    create: (s) => ({
      uid: s.uid,
      port: s.port,
      policy: s.policy,
      upstreams: upstreamsOf(s.resolvers),
      udp: [],
      tcp: [],
      sockets: new Set(),
      seen: new Map(),
      lines: { second: 0, count: 0, suppressed: 0 },
    }),
    update: (cur, s) => {
      cur.policy = s.policy;
      cur.upstreams = upstreamsOf(s.resolvers);
      cur.seen.clear(); // a new policy: answers given under the old one are not carried over
    },
    open: (e) => openEntry(e, hosts, { answer, onError, onAnswer: opts.onAnswer, tcp: (sock) => tcpConn(e, sock) }),
    close: closeEntry,
  });
  const subjects = table.entries;
  // The floor's fail_mode as last pushed (setFailMode).
  let floor = opts.failMode ?? 'closed';
  const upstream = createUpstream(opts.timeoutMs ?? 2000, onError);
  const forget = createForgetter(onError);

  const write = (e: Entry<P>, lines: Line[]) => {
    for (const l of lines) opts.log.write({ uid: e.uid, surface: 'network', ...l });
  };

  function policyOf(e: Entry<P>): DnsPolicy<P> {
    const failMode = e.policy === null ? floor : 'closed';
    return { decide: opts.decide, decideAnswer: opts.decideAnswer, policy: e.policy, failMode, refuseRcode };
  }

  /**
   * One message from the subject: `reply` gets what to send back (null = send nothing). What a UDP client can take
   * is its EDNS size, or 512; TCP has no limit.
   */
  function answer(e: Entry<P>, msg: Buffer, transport: Transport, reply: (out: Buffer | null) => void): void {
    const s = policyOf(e);
    const action = queryVerdict(s, parseQuery(msg), msg.length, transport);
    if (action.do === 'refuse') {
      write(e, [action.line]);
      const r = action.reply;
      return reply(r === null ? null : encodeError(r.id, r.rcode, r.query));
    }
    const { query: q, verdict } = action;
    upstream.forward(e.upstreams, q, (r) => {
      if (!r) {
        write(e, [
          { action: 'block', reason: 'dns_upstream_failed', subject: querySubject(q, transport), rule: verdict.rule },
        ]);
        return reply(encodeError(q.id, RCODE.SERVFAIL, q));
      }
      // Judged under the policy in force now: a reload while the query was out applies to its answer.
      const judged = answerVerdict(policyOf(e), q, verdict, transport, r.answer, ownAddresses());
      write(e, judged.lines);
      if (judged.refuse) return reply(encodeError(q.id, refuseRcode, q));
      remember(e, q.question.name, r.answer);
      const line = allowLine(e, verdict, q, transport, allowPerSec);
      if (line) write(e, [line]);
      const maxSize = transport === 'tcp' ? 65535 : (q.edns?.udpSize ?? 512);
      reply(r.msg.length > maxSize ? truncatedReply(r.msg, q.id, q) : readdress(r.msg, q.id, q.question, true));
    });
  }

  function tcpConn(e: Entry<P>, sock: net.Socket): void {
    sock.on('error', () => {});
    e.sockets.add(sock);
    sock.on('close', () => e.sockets.delete(sock));
    let dst: OriginalDst | null = null;
    try {
      dst = originalDst(fdOf(sock));
    } catch {
      dst = null;
    }
    const refused = tcpArrivalVerdict(dst, { address: sock.remoteAddress ?? '', port: sock.remotePort ?? 0 });
    if (refused) {
      write(e, [refused]);
      forget.reset(sock, 'reply', e.uid);
      return;
    }
    serveTcp(sock, (msg, done) => answer(e, msg, 'tcp', done));
  }

  async function closeEntry(e: Entry<P>): Promise<void> {
    for (const u of e.udp) u.close();
    for (const s of e.sockets) s.destroy();
    await Promise.all(e.tcp.map((s) => new Promise<void>((r) => s.close(() => r()))));
  }

  return {
    setSubject: (s) => table.set(s),
    removeSubject: (uid) => table.remove(uid),
    setFailMode(m) {
      floor = m;
    },
    seen(uid, name) {
      const m = subjects.get(uid)?.seen.get(name.toLowerCase().replace(/\.$/, ''));
      if (!m) return [];
      const now = Date.now();
      const out: string[] = [];
      for (const [a, exp] of m) if (exp > now) out.push(a);
      return out;
    },
    async close() {
      const all = [...subjects.values()];
      subjects.clear();
      await Promise.all(all.map(closeEntry));
      upstream.close();
    },
  };
}

const upstreamsOf = (list: string[]): Upstream[] => list.map(parseUpstream).filter((u): u is Upstream => !!u);

/** Keeps what an answer said for the proxy (`seen`), each address for its TTL within 60 s - 1 h. */
function remember<P>(e: Entry<P>, name: string, a: Answer): void {
  if (a.addresses.length === 0) return;
  const key = name.toLowerCase();
  let m = e.seen.get(key);
  if (!m) {
    if (e.seen.size >= SEEN_MAX) e.seen.delete(e.seen.keys().next().value!);
    m = new Map();
    e.seen.set(key, m);
  }
  const now = Date.now();
  for (const { address, ttl } of a.addresses) {
    const keep = Math.min(SEEN_TTL_MAX_S, Math.max(SEEN_TTL_MIN_S, ttl));
    m.set(plainIp(address), now + keep * 1000);
  }
}

/**
 * A forwarded query's line, or null when this second's allow lines are used up (counted into the next one's
 * `suppressed`). Shadow mode's would-be refusal is written like a block, never rate-limited.
 */
function allowLine<P>(e: Entry<P>, verdict: Verdict, q: Query, transport: Transport, perSec: number): Line | null {
  if (verdict.wouldBlock)
    return { action: 'would_block', reason: verdict.reason, subject: querySubject(q, transport), rule: verdict.rule };
  const sec = Math.floor(Date.now() / 1000);
  const l = e.lines;
  if (l.second !== sec) {
    l.second = sec;
    l.count = 0;
  }
  if (++l.count > perSec) {
    l.suppressed++;
    return null;
  }
  const subject = querySubject(q, transport);
  if (l.suppressed) subject.suppressed = l.suppressed;
  l.suppressed = 0;
  return { action: 'allow', reason: verdict.reason, subject, rule: verdict.rule };
}

type Answerer<P> = (e: Entry<P>, msg: Buffer, transport: Transport, reply: (out: Buffer | null) => void) => void;

/** Opens an entry's UDP sockets and TCP listeners on every host (an IPv6 host the machine does not have is skipped). */
async function openEntry<P>(
  e: Entry<P>,
  hosts: string[],
  o: {
    answer: Answerer<P>;
    onError: (err: Error, ctx: { uid: number; stage: string }) => void;
    onAnswer: ((seconds: number) => void) | undefined;
    tcp: (sock: net.Socket) => void;
  },
): Promise<void> {
  for (const host of hosts) {
    const fam = net.isIPv6(host) ? 'udp6' : 'udp4';
    const udp = dgram.createSocket({ type: fam, ipv6Only: fam === 'udp6' });
    udp.on('error', (err) => o.onError(err, { uid: e.uid, stage: 'dns_udp' }));
    udp.on('message', (msg, rinfo) => {
      const t0 = o.onAnswer ? performance.now() : 0;
      try {
        o.answer(e, msg, 'udp', (out) => {
          if (out) udp.send(out, rinfo.port, rinfo.address);
          o.onAnswer?.((performance.now() - t0) / 1000);
        });
      } catch (err) {
        o.onError(err as Error, { uid: e.uid, stage: 'dns_answer' });
      }
    });
    try {
      await new Promise<void>((resolve, reject) => {
        udp.once('error', reject);
        udp.bind({ address: host, port: e.port, exclusive: true }, () => {
          udp.off('error', reject);
          resolve();
        });
      });
    } catch (err) {
      udp.close();
      const code = (err as NodeJS.ErrnoException).code;
      if (net.isIPv6(host) && (code === 'EADDRNOTAVAIL' || code === 'EAFNOSUPPORT')) continue;
      throw err;
    }
    e.udp.push(udp);
    const srv = net.createServer({ pauseOnConnect: true, noDelay: true }, o.tcp);
    await new Promise<void>((resolve, reject) => {
      srv.once('error', reject);
      srv.listen({ host, port: e.port, exclusive: true, backlog: 1024 }, () => {
        srv.off('error', reject);
        resolve();
      });
    });
    e.tcp.push(srv);
  }
}

/** Serves DNS over a redirected TCP connection: length-prefixed messages, answered in order. */
function serveTcp(sock: net.Socket, answer: (msg: Buffer, done: (out: Buffer | null) => void) => void): void {
  sock.setTimeout(TCP_IDLE_MS, () => sock.destroy());
  let acc: Buffer = Buffer.alloc(0);
  let chain = Promise.resolve();
  sock.on('data', (d: Buffer) => {
    acc = acc.length ? Buffer.concat([acc, d]) : d;
    while (acc.length >= 2 && acc.length >= 2 + acc.readUInt16BE(0)) {
      const msg = Buffer.from(acc.subarray(2, 2 + acc.readUInt16BE(0)));
      acc = acc.subarray(2 + msg.length);
      chain = chain.then(async () => {
        const out = await new Promise<Buffer | null>((resolve) => answer(msg, resolve));
        if (sock.destroyed) return;
        if (!out) {
          sock.destroy(); // not even a header: not DNS
          return;
        }
        const len = Buffer.alloc(2);
        len.writeUInt16BE(out.length);
        sock.write(Buffer.concat([len, out]));
      });
    }
    if (acc.length > 2 + 65535) sock.destroy();
  });
  sock.resume();
}
