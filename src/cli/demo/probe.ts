/**
 * The agent's side of the lab: run AS the leashed account inside the agent namespace
 * (`setpriv --reuid=U ... node probe.js '<json probes>'`). Each probe tries one thing and reports what happened,
 * so tests assert on errno codes and on the upstream's own report of where the connection landed.
 * Self-contained (node:* imports only) so it can be copied somewhere the account can read, with tests/lab/probe.ts.
 */
import dgram from 'node:dgram';
import dns from 'node:dns';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';

/** What `leash demo` tries (tests/lab/probe.ts adds the kinds only tests and benches try). */
export type Probe =
  | { kind: 'tls'; host: string; port: number; servername?: string }
  | { kind: 'http'; host: string; port: number; hostHeader: string }
  | { kind: 'tcp'; host: string; port: number; send?: string }
  | { kind: 'udp'; host: string; port: number }
  | { kind: 'dns'; name: string }
  /**
   * One A query (or `qtype` 28: AAAA) in one datagram, straight to `server`:53: the errno is the one sendto really
   * returned.
   */
  | { kind: 'dnsudp'; server: string; name: string; qtype?: 1 | 28 };

export interface ProbeResult {
  ok: boolean;
  /** errno code (ECONNRESET, EPERM, ...) when it failed. */
  code: string | null;
  /** What the server sent back (the upstream's JSON report), or resolved addresses. */
  data: string;
  ms: number;
}

export function finish(t0: number, ok: boolean, code: string | null, data: string): ProbeResult {
  return { ok, code, data, ms: Math.round((performance.now() - t0) * 10) / 10 };
}

export function stream(
  p: { kind: string; host: string; port: number },
  connect: () => net.Socket,
  send: string | Buffer | null,
  firstData = false,
): Promise<ProbeResult> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    let data = '';
    let settled = false;
    const done = (r: ProbeResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      resolve(r);
    };
    const s = connect();
    const timer = setTimeout(() => done(finish(t0, false, 'ETIMEDOUT', data)), 8000);
    s.on(p.kind === 'tls' ? 'secureConnect' : 'connect', () => {
      if (send !== null) s.write(send);
    });
    s.on('data', (d: Buffer) => {
      data += d.toString('latin1');
      if (firstData) done(finish(t0, true, null, data));
    });
    s.on('error', (e: NodeJS.ErrnoException) => done(finish(t0, false, e.code ?? 'ERR', data)));
    // First among the 'end' listeners: Node's own close the socket (a TLS one before its handshake at once), and a
    // socket that got a FIN stays listed (CLOSE_WAIT) only until then.
    s.prependListener('end', () => {
      if (data.length > 0) return done(finish(t0, true, null, data));
      done(finish(t0, false, resetTakenByWrite(s.localPort, p.port) ? 'ECONNRESET' : 'EOF', data));
    });
  });
}

/**
 * An end of stream that was a reset: one that came before the client's first write (a proxy refusing at accept) is
 * reported to that write, which Node's TLS layer drops during its handshake, and the read after it sees EOF. The
 * kernel still tells them apart: a socket that got a FIN stays in /proc/net/tcp (CLOSE_WAIT) until it is closed, a
 * reset one is gone from it at once. False when it is listed or /proc/net cannot be read.
 */
function resetTakenByWrite(localPort: number | undefined, remotePort: number): boolean {
  if (!localPort) return false;
  const hex = (n: number) => `:${n.toString(16).toUpperCase().padStart(4, '0')}`;
  let read = false;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    read = true;
    for (const line of text.split('\n').slice(1)) {
      const [, local, remote, state] = line.trim().split(/\s+/);
      // 06 (TIME_WAIT): an earlier connection's ports, which loopback may reuse; not this socket.
      if (state !== '06' && local?.endsWith(hex(localPort)) && remote?.endsWith(hex(remotePort))) return false;
    }
  }
  return read;
}

function udp(p: { host: string; port: number }): Promise<ProbeResult> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const sock = dgram.createSocket(net.isIPv6(p.host) ? 'udp6' : 'udp4');
    sock.on('error', (e: NodeJS.ErrnoException) => {
      sock.close();
      resolve(finish(t0, false, e.code ?? 'ERR', ''));
    });
    sock.send(Buffer.from('x'), p.port, p.host, (err) => {
      sock.close();
      const e = err as NodeJS.ErrnoException | null;
      resolve(finish(t0, !e, e ? (e.code ?? 'ERR') : null, ''));
    });
  });
}

export async function lookup(name: string): Promise<ProbeResult> {
  const t0 = performance.now();
  try {
    const all = await dns.promises.lookup(name, { all: true });
    return finish(t0, true, null, all.map((a) => a.address).join(','));
  } catch (e) {
    return finish(t0, false, (e as NodeJS.ErrnoException).code ?? 'ERR', '');
  }
}

/** An A (or `qtype`) query for `name` (id 0x1234, recursion desired). */
export function dnsQuery(name: string, qtype = 1): Buffer {
  return Buffer.concat([
    Buffer.from([0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]),
    ...name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])),
    Buffer.from([0, 0, qtype, 0, 1]),
  ]);
}

const RCODES = ['NOERROR', 'FORMERR', 'SERVFAIL', 'NXDOMAIN', 'NOTIMP', 'REFUSED'];

/**
 * A one-answer A response -> the probe's result: its last 4 bytes are the address (an AAAA's last 16, as hex); no
 * answer -> the rcode's name.
 */
export function dnsAnswer(t0: number, msg: Buffer, qtype = 1): ProbeResult {
  const ok = msg.length >= 12 && msg.readUInt16BE(6) > 0;
  const rcode = msg.length >= 4 ? (RCODES[msg.readUInt16BE(2) & 0xf] ?? 'RCODE') : 'SHORT';
  return finish(
    t0,
    ok,
    ok ? null : rcode === 'NOERROR' ? 'ENODATA' : rcode,
    !ok
      ? ''
      : qtype === 28
        ? msg.subarray(msg.length - 16).toString('hex')
        : [...msg.subarray(msg.length - 4)].join('.'),
  );
}

export function dnsUdp(server: string, name: string, qtype = 1): Promise<ProbeResult> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const sock = dgram.createSocket(net.isIPv6(server) ? 'udp6' : 'udp4');
    const timer = setTimeout(() => done(finish(t0, false, 'ETIMEDOUT', '')), 3000);
    const done = (r: ProbeResult) => {
      clearTimeout(timer);
      sock.close();
      resolve(r);
    };
    sock.on('error', (e: NodeJS.ErrnoException) => done(finish(t0, false, e.code ?? 'ERR', '')));
    sock.on('message', (msg: Buffer) => done(dnsAnswer(t0, msg, qtype)));
    sock.send(dnsQuery(name, qtype), 53, server, (err) => {
      const e = err as NodeJS.ErrnoException | null;
      if (e) done(finish(t0, false, e.code ?? 'ERR', ''));
    });
  });
}

export async function runProbe(p: Probe): Promise<ProbeResult> {
  switch (p.kind) {
    case 'tls':
      return stream(
        p,
        () => tls.connect({ host: p.host, port: p.port, servername: p.servername, rejectUnauthorized: false }),
        null,
      );
    case 'http':
      return stream(
        p,
        () => net.connect(p.port, p.host),
        `GET / HTTP/1.1\r\nHost: ${p.hostHeader}\r\nConnection: close\r\n\r\n`,
      );
    case 'tcp':
      return stream(p, () => net.connect(p.port, p.host), p.send ?? '');
    case 'udp':
      return udp(p);
    case 'dns':
      return lookup(p.name);
    case 'dnsudp':
      return dnsUdp(p.server, p.name, p.qtype);
  }
}

/** Runs the probes given as JSON in argv[2] with `run` and prints their results, with the UID they ran as. */
export async function probeMain<P>(run: (p: P) => Promise<ProbeResult>): Promise<void> {
  const probes = JSON.parse(process.argv[2] ?? '[]') as P[];
  const out: ProbeResult[] = [];
  for (const p of probes) out.push(await run(p));
  process.stdout.write(JSON.stringify({ uid: process.getuid?.(), results: out }) + '\n');
}

/** True in the module node was asked to run (not in one it imports). */
export const isMain = (url: string): boolean =>
  !!process.argv[1] && fileURLToPath(url) === path.resolve(process.argv[1]);

if (isMain(import.meta.url)) {
  probeMain(runProbe).catch((e: unknown) => {
    process.stderr.write(String(e) + '\n');
    process.exit(1);
  });
}
