/**
 * The forwarder's side towards the resolvers, shared by every subject: UDP first, TCP when an answer comes back
 * truncated, each resolver tried once, in order. Knows nothing of subjects or policy.
 */
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import { encodeQuery, readAnswer, type Answer, type Query } from './wire.js';

export interface Upstream {
  host: string;
  port: number;
  family: 4 | 6;
}

/** Concurrent upstream queries in flight per forwarder (a flood beyond this is answered SERVFAIL at once). */
const MAX_PENDING = 4096;

/** A resolver as configured (`ip`, `ip:port`, `[v6]`, `[v6]:port`), or null when it is none of those. */
export function parseUpstream(s: string): Upstream | null {
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

/** An answer to the question asked, or null (none came, or none that fits). */
export type Got = { msg: Buffer; answer: Answer } | null;

/** The forwarder's side towards the resolvers (UDP, TCP on truncation), shared by every subject. */
export function createUpstream(
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
