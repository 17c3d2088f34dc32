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
import type { Verdict } from '../../engine/types.js';
import { loadNative, type OriginalDst } from '../../native.js';
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
} from './dns-wire.js';
import type { DecisionWriter } from '../../log/decisions.js';
import { createListenerTable } from './listeners.js';
import { plainIp } from './resolve.js';

export type DnsDecide<P> = (name: string, policy: P | null) => Verdict;

export interface DnsSubject<P> {
  uid: number;
  port: number;
  policy: P | null;
  /** Where this subject's allowed queries go (IP literals, optionally `ip:port` / `[v6]:port`). */
  resolvers: string[];
}

export interface DnsForwarderOptions<P> {
  decide: DnsDecide<P>;
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

  // --- upstream over UDP: a few sockets per family, random ids, answers matched by id, source and question ------
  interface Pending {
    id: number;
    upstream: Upstream;
    q: Query;
    resolve: (r: { msg: Buffer; answer: Answer } | null) => void;
    timer: NodeJS.Timeout;
  }
  const pending = new Map<number, Pending>();
  const upSockets: Record<4 | 6, dgram.Socket[]> = { 4: [], 6: [] };
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
  const upSocket = (family: 4 | 6): dgram.Socket => {
    const list = upSockets[family];
    if (list.length < 4) {
      const s = dgram.createSocket(family === 4 ? 'udp4' : 'udp6');
      s.on('error', (err) => onError(err, { uid: -1, stage: 'dns_upstream' }));
      s.on('message', (msg, rinfo) => {
        if (msg.length < 2) return;
        const p = pending.get(msg.readUInt16BE(0));
        if (!p || plainIp(rinfo.address) !== plainIp(p.upstream.host) || rinfo.port !== p.upstream.port) return;
        const answer = readAnswer(msg, p.id, p.q.question);
        if (!answer) return; // not the answer to this question: keep waiting (a spoof, or a stale reply)
        pending.delete(p.id);
        clearTimeout(p.timer);
        p.resolve({ msg, answer });
      });
      s.bind(0);
      s.unref();
      list.push(s);
      return s;
    }
    return list[Math.floor(Math.random() * list.length)]!;
  };

  const askUdp = (u: Upstream, q: Query): Promise<{ msg: Buffer; answer: Answer } | null> =>
    new Promise((resolve) => {
      const id = pending.size >= MAX_PENDING ? -1 : freshId();
      if (id < 0) return resolve(null);
      const timer = setTimeout(() => {
        pending.delete(id);
        resolve(null);
      }, timeoutMs);
      pending.set(id, { id, upstream: u, q, resolve, timer });
      upSocket(u.family).send(encodeQuery(id, q), u.port, u.host, (err) => {
        if (err && pending.get(id)?.resolve === resolve) {
          pending.delete(id);
          clearTimeout(timer);
          resolve(null);
        }
      });
    });

  const askTcp = (u: Upstream, q: Query): Promise<{ msg: Buffer; answer: Answer } | null> =>
    new Promise((resolve) => {
      const id = randomBytes(2).readUInt16BE(0);
      const body = encodeQuery(id, q);
      const len = Buffer.alloc(2);
      len.writeUInt16BE(body.length);
      let acc = Buffer.alloc(0);
      let settled = false;
      const s = net.connect({ host: u.host, port: u.port });
      const done = (r: { msg: Buffer; answer: Answer } | null) => {
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

  /** Resolvers in order; UDP first, TCP when the answer came back truncated (or when `tcp` is asked for). */
  async function forward(e: Entry<P>, q: Query): Promise<{ msg: Buffer; answer: Answer } | null> {
    for (const u of e.upstreams) {
      const r = await askUdp(u, q);
      if (r && !r.answer.truncated) return r;
      if (r?.answer.truncated) {
        const t = await askTcp(u, q);
        if (t) return t;
      }
    }
    return null;
  }

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

  function logAllow(e: Entry<P>, rec: { reason: string; subject: Record<string, unknown>; rule: string | null }): void {
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
    const subject = l.suppressed ? { ...rec.subject, suppressed: l.suppressed } : rec.subject;
    l.suppressed = 0;
    opts.log.write({ uid: e.uid, surface: 'network', action: 'allow', reason: rec.reason, subject, rule: rec.rule });
  }

  function logBlock(e: Entry<P>, reason: string, subject: Record<string, unknown>, rule: string | null = null): void {
    opts.log.write({ uid: e.uid, surface: 'network', action: 'block', reason, subject, rule });
  }

  /**
   * One message from the subject: the reply to send (null = send nothing). `maxSize` is what a UDP client can
   * take (its EDNS size, or 512); TCP has no limit.
   */
  async function answer(e: Entry<P>, msg: Buffer, transport: 'udp' | 'tcp'): Promise<Buffer | null> {
    const parsed = parseQuery(msg);
    if (!parsed.ok) {
      const reason = parsed.rcode === RCODE.NOTIMP ? 'dns_unsupported' : 'dns_malformed';
      logBlock(e, reason, { dns: null, qtype: null, transport, bytes: msg.length, why: parsed.why });
      return parsed.id === null ? null : encodeError(parsed.id, parsed.rcode, null);
    }
    const q = parsed.query;
    const name = q.question.name;
    const subject = {
      dns: name.toLowerCase(),
      qtype: typeName(q.question.qtype),
      ...(transport === 'tcp' ? { transport } : {}),
    };
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
        verdict = opts.decide(name, e.policy);
      } catch {
        verdict = { action: 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
      }
    }
    if (verdict.action === 'block') {
      logBlock(e, verdict.reason, subject, verdict.rule);
      return encodeError(q.id, refuseRcode, q);
    }
    const r = e.upstreams.length ? await forward(e, q) : null;
    if (!r) {
      logBlock(e, 'dns_upstream_failed', subject, verdict.rule);
      return encodeError(q.id, RCODE.SERVFAIL, q);
    }
    remember(e, name, r.answer);
    logAllow(e, { reason: verdict.reason, subject, rule: verdict.rule });
    const maxSize = transport === 'tcp' ? 65535 : (q.edns?.udpSize ?? 512);
    if (r.msg.length > maxSize) return truncatedReply(r.msg, q.id, q);
    return readdress(r.msg, q.id, q.question);
  }

  async function open(e: Entry<P>): Promise<void> {
    for (const host of hosts) {
      const fam = net.isIPv6(host) ? 'udp6' : 'udp4';
      const udp = dgram.createSocket({ type: fam, ipv6Only: fam === 'udp6' });
      udp.on('error', (err) => onError(err, { uid: e.uid, stage: 'dns_udp' }));
      udp.on('message', (msg, rinfo) => {
        const t0 = opts.onAnswer ? performance.now() : 0;
        answer(e, msg, 'udp').then(
          (out) => {
            if (out) udp.send(out, rinfo.port, rinfo.address);
            opts.onAnswer?.((performance.now() - t0) / 1000);
          },
          (err: Error) => onError(err, { uid: e.uid, stage: 'dns_answer' }),
        );
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
    // the subject (its loopback TCP to 18000-18999 lands on its proxy instead) or by anyone else, is refused.
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
      sock.resetAndDestroy();
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
          const out = await answer(e, msg, 'tcp');
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
      for (const p of pending.values()) {
        clearTimeout(p.timer);
        p.resolve(null);
      }
      pending.clear();
      for (const s of [...upSockets[4], ...upSockets[6]]) s.close();
      upSockets[4] = [];
      upSockets[6] = [];
    },
  };
}
