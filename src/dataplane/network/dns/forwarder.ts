/**
 * The DNS forwarder: one listener per subject (UDP and TCP on 127.0.0.1 and ::1, the port the subject's nft chain
 * redirects its port-53 traffic to), so the port a query arrives on names the subject, whatever the packet says.
 * Each query is parsed strictly (dns-wire.ts), judged by the subject's network policy (decideDnsName), and either
 * re-built and forwarded to the subject's resolvers (UDP, then TCP when the answer is truncated) or answered
 * REFUSED (or NXDOMAIN) with nothing sent anywhere. What the subject's answers said (name -> addresses) is kept for
 * the proxy (`seen`), so a name-decided connection to an address the subject was told is taken as is.
 */
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import type { Verdict } from '../../../engine/types.js';
import { loadNative, type OriginalDst } from '../../../native.js';
import { createForgetter } from '../proxy/forget.js';
import {
  RCODE,
  encodeError,
  encodeQuery,
  parseQuery,
  readAnswer,
  readdress,
  truncatedReply,
  typeName,
  type Answer,
  type Query,
} from './wire.js';
import type { DecisionWriter } from '../../../log/decisions.js';
import { createListenerTable } from '../listeners.js';
import { ownAddresses, plainIp } from '../proxy/resolve.js';

export type DnsDecide<P> = (name: string, policy: P | null) => Verdict;
/** Whether an answer for a name an entry allowed may carry an address (the engine's decideDnsAnswer). */
export type DnsAnswerDecide<P> = (name: string, ip: string, own: boolean, policy: P) => Verdict | null;

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
  /** What a subject without a policy gets: closed (default) refuses with no_policy, open forwards (still logged). */
  failMode?: () => 'closed' | 'open';
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
  close(): Promise<void>;
}

interface Upstream {
  host: string;
  port: number;
  family: 4 | 6;
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
/** Concurrent upstream queries in flight per forwarder (a flood beyond this is answered SERVFAIL at once). */
const MAX_PENDING = 4096;
const TCP_IDLE_MS = 10_000;

function parseUpstream(s: string): Upstream | null {
  let host = s;
  let port = 53;
  const br = /^\[([^\]]+)\](?::(\d+))?$/.exec(s);
  if (br) {
    host = br[1]!;
    if (br[2]) port = Number(br[2]);
  } else if (net.isIPv4(s.split(':')[0]!) && s.includes(':')) {
    host = s.split(':')[0]!;
    port = Number(s.split(':')[1]);
  }
  const fam = net.isIP(host);
  if (fam === 0 || !Number.isInteger(port) || port < 1 || port > 65535) return null;
  return { host, port, family: fam as 4 | 6 };
}

function fdOf(s: net.Socket): number {
  return (s as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
}

type Got = { msg: Buffer; answer: Answer } | null;

/** The forwarder's side towards the resolvers (UDP, TCP on truncation), shared by every subject. */
function createUpstream(
  timeoutMs: number,
  onError: (err: Error, ctx: { uid: number; stage: string }) => void,
): { forward: (ups: Upstream[], q: Query, done: (r: Got) => void) => void; close: () => void } {
  // --- upstream over UDP: a few CONNECTED sockets per resolver (the kernel then accepts datagrams from that resolver
  // only, and routes once per socket rather than once per send), random ids, answers matched by id, socket and
  // question. No promise, timer or allocation beyond the messages themselves per query: one sweep expires what the
  // resolver never answered.
  interface Pending {
    id: number;
    sock: UpSock;
    q: Query;
    deadline: number;
    done: (r: Got) => void;
  }
  const pending = new Map<number, Pending>();
  /** A connected upstream socket; what is sent before the connect completes waits in `queue`. */
  interface UpSock {
    s: dgram.Socket;
    queue: Buffer[] | null;
  }
  const upSockets = new Map<string, UpSock[]>();
  let idPool = Buffer.alloc(0);
  let idAt = 0;
  const freshId = (): number => {
    for (let i = 0; i < 8; i++) {
      if (idAt + 2 > idPool.length) {
        idPool = randomBytes(4096);
        idAt = 0;
      }
      const id = idPool.readUInt16BE(idAt);
      idAt += 2;
      if (!pending.has(id)) return id;
    }
    return -1;
  };
  const UP_SOCKETS = 4;
  let upTurn = 0;
  const upSocket = (u: Upstream): UpSock => {
    const key = `${u.host}|${u.port}`;
    let list = upSockets.get(key);
    if (!list) upSockets.set(key, (list = []));
    if (list.length < UP_SOCKETS) {
      const s = dgram.createSocket(u.family === 4 ? 'udp4' : 'udp6');
      const us: UpSock = { s, queue: [] };
      s.on('error', (err: NodeJS.ErrnoException) => {
        // A resolver that is down answers ICMP unreachable, reported on a connected socket: the queries waiting
        // for it time out (or go to the next resolver) as they would unconnected, with no line per query.
        if (err.code === 'ECONNREFUSED') return;
        onError(err, { uid: -1, stage: 'dns_upstream' });
        if (us.queue !== null) {
          // The connect itself failed: this socket is never usable.
          const at = list!.indexOf(us);
          if (at >= 0) list!.splice(at, 1);
          us.queue = null;
          s.close();
        }
      });
      s.on('message', (msg) => {
        if (msg.length < 12) return;
        const p = pending.get(msg.readUInt16BE(0));
        if (!p || p.sock !== us) return;
        const answer = readAnswer(msg, p.id, p.q.question);
        if (!answer) return; // not the answer to this question: keep waiting (a spoof, or a stale reply)
        pending.delete(p.id);
        p.done({ msg, answer });
      });
      s.connect(u.port, u.host, () => {
        const q = us.queue ?? [];
        us.queue = null;
        for (const b of q) s.send(b);
      });
      s.unref();
      list.push(us);
      return us;
    }
    upTurn = (upTurn + 1) % list.length;
    return list[upTurn]!;
  };
  const sweep = setInterval(
    () => {
      if (pending.size === 0) return;
      const now = Date.now();
      for (const p of pending.values())
        if (p.deadline <= now) {
          pending.delete(p.id);
          p.done(null);
        }
    },
    Math.max(10, Math.min(100, Math.floor(timeoutMs / 4))),
  );
  sweep.unref();

  const askUdp = (u: Upstream, q: Query, done: (r: Got) => void): void => {
    const id = pending.size >= MAX_PENDING ? -1 : freshId();
    if (id < 0) return done(null);
    const sock = upSocket(u);
    const p: Pending = { id, sock, q, deadline: Date.now() + timeoutMs, done };
    pending.set(id, p);
    try {
      const b = encodeQuery(id, q);
      if (sock.queue) sock.queue.push(b);
      else sock.s.send(b);
    } catch {
      if (pending.get(id) === p) pending.delete(id);
      done(null);
    }
  };

  const askTcp = (u: Upstream, q: Query): Promise<Got> =>
    new Promise((resolve) => {
      const id = randomBytes(2).readUInt16BE(0);
      const body = encodeQuery(id, q);
      const len = Buffer.alloc(2);
      len.writeUInt16BE(body.length);
      let acc = Buffer.alloc(0);
      let settled = false;
      const s = net.connect({ host: u.host, port: u.port });
      const done = (r: Got) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        s.destroy();
        resolve(r);
      };
      const timer = setTimeout(() => done(null), timeoutMs);
      s.on('connect', () => s.write(Buffer.concat([len, body])));
      s.on('data', (d: Buffer) => {
        acc = Buffer.concat([acc, d]);
        if (acc.length >= 2 && acc.length >= 2 + acc.readUInt16BE(0)) {
          const msg = acc.subarray(2, 2 + acc.readUInt16BE(0));
          const answer = readAnswer(msg, id, q.question);
          done(answer && !answer.truncated ? { msg: Buffer.from(msg), answer } : null);
        }
      });
      s.on('error', () => done(null));
      s.on('close', () => done(null));
    });

  /** Resolvers in order; UDP first, TCP when the answer came back truncated. */
  function forward(ups: Upstream[], q: Query, done: (r: Got) => void, i = 0): void {
    const u = ups[i];
    if (!u) return done(null);
    askUdp(u, q, (r) => {
      if (r && !r.answer.truncated) return done(r);
      if (!r) return forward(ups, q, done, i + 1);
      askTcp(u, q).then(
        (t) => (t ? done(t) : forward(ups, q, done, i + 1)),
        () => forward(ups, q, done, i + 1),
      );
    });
  }

  return {
    forward: (ups, q, done) => forward(ups, q, done),
    close() {
      clearInterval(sweep);
      const left = [...pending.values()];
      pending.clear();
      for (const p of left) p.done(null);
      for (const list of upSockets.values()) for (const u of list) u.s.close();
      upSockets.clear();
    },
  };
}

/** Creates the forwarder; no listener opens until setSubject. */
export function createDnsForwarder<P>(opts: DnsForwarderOptions<P>): DnsForwarder<P> {
  const hosts = opts.hosts ?? ['127.0.0.1', '::1'];
  const timeoutMs = opts.timeoutMs ?? 2000;
  const refuseRcode = opts.refuse === 'nxdomain' ? RCODE.NXDOMAIN : RCODE.REFUSED;
  const allowPerSec = opts.allowLinesPerSec ?? 100;
  const onError = opts.onError ?? (() => {});
  const originalDst = opts.originalDst ?? ((fd: number) => loadNative().originalDst(fd));
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
    open,
    close: closeEntry,
  });
  const subjects = table.entries;

  const upstream = createUpstream(timeoutMs, onError);
  const forward = upstream.forward;
  const forget = createForgetter(onError);

  function remember(e: Entry<P>, name: string, a: Answer): void {
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

  const subjectOf = (q: Query, transport: 'udp' | 'tcp'): Record<string, unknown> => ({
    dns: q.question.name.toLowerCase(),
    qtype: typeName(q.question.qtype),
    ...(transport === 'tcp' ? { transport } : {}),
  });

  function logAllow(e: Entry<P>, verdict: Verdict, q: Query, transport: 'udp' | 'tcp'): void {
    if (verdict.wouldBlock) {
      // Shadow mode: a would-be refusal is logged like a block, never rate-limited.
      const subject = subjectOf(q, transport);
      opts.log.write({
        uid: e.uid,
        surface: 'network',
        action: 'would_block',
        reason: verdict.reason,
        subject,
        rule: verdict.rule,
      });
      return;
    }
    const sec = Math.floor(Date.now() / 1000);
    const l = e.lines;
    if (l.second !== sec) {
      l.second = sec;
      l.count = 0;
    }
    if (++l.count > allowPerSec) {
      l.suppressed++;
      return;
    }
    const subject = subjectOf(q, transport);
    if (l.suppressed) subject.suppressed = l.suppressed;
    l.suppressed = 0;
    opts.log.write({
      uid: e.uid,
      surface: 'network',
      action: 'allow',
      reason: verdict.reason,
      subject,
      rule: verdict.rule,
    });
  }

  function logBlock(e: Entry<P>, reason: string, subject: Record<string, unknown>, rule: string | null = null): void {
    opts.log.write({ uid: e.uid, surface: 'network', action: 'block', reason, subject, rule });
  }

  /** True (and the line written) when an answer leads the allowed name into a local or internal address. */
  function rebound(e: Entry<P>, policy: P, rule: string, q: Query, transport: 'udp' | 'tcp', a: Answer): boolean {
    if (!opts.decideAnswer) return false;
    for (const { address } of a.addresses) {
      const ip = plainIp(address);
      const v = opts.decideAnswer(q.question.name, ip, ownAddresses().has(ip), policy);
      if (v === null) continue;
      const subject = { ...subjectOf(q, transport), address: ip };
      if (v.action === 'block') {
        logBlock(e, v.reason, subject, rule);
        return true;
      }
      opts.log.write({ uid: e.uid, surface: 'network', action: 'would_block', reason: v.reason, subject, rule });
    }
    return false;
  }

  /**
   * One message from the subject: `reply` gets what to send back (null = send nothing). What a UDP client can take
   * is its EDNS size, or 512; TCP has no limit.
   */
  function answer(e: Entry<P>, msg: Buffer, transport: 'udp' | 'tcp', reply: (out: Buffer | null) => void): void {
    const parsed = parseQuery(msg);
    if (!parsed.ok) {
      const reason = parsed.rcode === RCODE.NOTIMP ? 'dns_unsupported' : 'dns_malformed';
      logBlock(e, reason, { dns: null, qtype: null, transport, bytes: msg.length, why: parsed.why });
      return reply(parsed.id === null ? null : encodeError(parsed.id, parsed.rcode, null));
    }
    const q = parsed.query;
    let verdict: Verdict;
    if (e.policy === null)
      verdict = {
        action: opts.failMode?.() === 'open' ? 'allow' : 'block',
        reason: 'no_policy',
        source: 'fail_mode',
        rule: null,
      };
    else {
      try {
        verdict = opts.decide(q.question.name, e.policy);
      } catch {
        verdict = { action: 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
      }
    }
    if (verdict.action === 'block') {
      logBlock(e, verdict.reason, subjectOf(q, transport), verdict.rule);
      return reply(encodeError(q.id, refuseRcode, q));
    }
    forward(e.upstreams, q, (r) => {
      if (!r) {
        logBlock(e, 'dns_upstream_failed', subjectOf(q, transport), verdict.rule);
        return reply(encodeError(q.id, RCODE.SERVFAIL, q));
      }
      if (verdict.rule !== null && e.policy !== null && rebound(e, e.policy, verdict.rule, q, transport, r.answer))
        return reply(encodeError(q.id, refuseRcode, q));
      remember(e, q.question.name, r.answer);
      logAllow(e, verdict, q, transport);
      const maxSize = transport === 'tcp' ? 65535 : (q.edns?.udpSize ?? 512);
      reply(r.msg.length > maxSize ? truncatedReply(r.msg, q.id, q) : readdress(r.msg, q.id, q.question, true));
    });
  }

  async function open(e: Entry<P>): Promise<void> {
    for (const host of hosts) {
      const fam = net.isIPv6(host) ? 'udp6' : 'udp4';
      const udp = dgram.createSocket({ type: fam, ipv6Only: fam === 'udp6' });
      udp.on('error', (err) => onError(err, { uid: e.uid, stage: 'dns_udp' }));
      udp.on('message', (msg, rinfo) => {
        const t0 = opts.onAnswer ? performance.now() : 0;
        try {
          answer(e, msg, 'udp', (out) => {
            if (out) udp.send(out, rinfo.port, rinfo.address);
            opts.onAnswer?.((performance.now() - t0) / 1000);
          });
        } catch (err) {
          onError(err as Error, { uid: e.uid, stage: 'dns_answer' });
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
      const srv = net.createServer({ pauseOnConnect: true, noDelay: true }, (sock) => tcpConn(e, sock));
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
    // Only connections the chain redirected (original port 53) are served: a direct connection to this port, by
    // the subject (its loopback TCP to 18000-20999 lands on its proxy instead) or by anyone else, is refused.
    if (!dst || dst.port !== 53) {
      logBlock(
        e,
        dst ? 'not_redirected' : 'no_original_dst',
        {
          dns: null,
          qtype: null,
          transport: 'tcp',
          peer: `${plainIp(sock.remoteAddress ?? '')}:${sock.remotePort ?? 0}`,
        },
        null,
      );
      forget.reset(sock, 'reply', e.uid);
      return;
    }
    sock.setTimeout(TCP_IDLE_MS, () => sock.destroy());
    let acc: Buffer = Buffer.alloc(0);
    let chain = Promise.resolve();
    sock.on('data', (d: Buffer) => {
      acc = acc.length ? Buffer.concat([acc, d]) : d;
      while (acc.length >= 2 && acc.length >= 2 + acc.readUInt16BE(0)) {
        const msg = Buffer.from(acc.subarray(2, 2 + acc.readUInt16BE(0)));
        acc = acc.subarray(2 + msg.length);
        chain = chain.then(async () => {
          const out = await new Promise<Buffer | null>((resolve) => answer(e, msg, 'tcp', resolve));
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

  async function closeEntry(e: Entry<P>): Promise<void> {
    for (const u of e.udp) u.close();
    for (const s of e.sockets) s.destroy();
    await Promise.all(e.tcp.map((s) => new Promise<void>((r) => s.close(() => r()))));
  }

  const upstreamsOf = (list: string[]): Upstream[] => list.map(parseUpstream).filter((u): u is Upstream => !!u);

  return {
    setSubject: (s) => table.set(s),
    removeSubject: (uid) => table.remove(uid),
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
