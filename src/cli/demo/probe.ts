/**
 * The agent's side of the lab: run AS the leashed account inside the agent namespace
 * (`setpriv --reuid=U ... node probe.js '<json probes>'`). Each probe tries one thing and reports what happened,
 * so tests assert on errno codes and on the upstream's own report of where the connection landed.
 * Self-contained (node:* imports only) so it can be copied somewhere the account can read.
 */
import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';
import tls from 'node:tls';

export type Probe =
  /** `localPort`: the source port to connect from (an attacker choosing one that a conntrack entry still holds). */
  | { kind: 'tls'; host: string; port: number; servername?: string; localPort?: number }
  | { kind: 'http'; host: string; port: number; hostHeader: string }
  /** `hex`: raw bytes to send instead of `send`; `firstData`: done at the first bytes back (a handshake that stalls). */
  | { kind: 'tcp'; host: string; port: number; send?: string; hex?: string; firstData?: boolean; localPort?: number }
  | { kind: 'udp'; host: string; port: number }
  | { kind: 'dns'; name: string }
  /**
   * One A query (or `qtype` 28: AAAA) in one datagram, straight to `server`:53: the errno is the one sendto really
   * returned.
   */
  | { kind: 'dnsudp'; server: string; name: string; qtype?: 1 | 28 }
  | { kind: 'dnsserver'; server: string; name: string }
  /**
   * `count` connections opened at once and held for `holdMs`: how many were still open then, and how many the
   * proxy refused (reset or closed early). All are closed before it reports.
   */
  | { kind: 'flood'; host: string; port: number; count: number; holdMs: number }
  /** One A query over TCP (what a resolver library falls back to for a truncated answer). */
  | { kind: 'dnstcp'; server: string; name: string }
  /** Raw bytes (hex) as one datagram to server:53; the result's data is the reply in hex ('' when none came). */
  | { kind: 'rawudp53'; server: string; hex: string };

export interface ProbeResult {
  ok: boolean;
  /** errno code (ECONNRESET, EPERM, ...) when it failed. */
  code: string | null;
  /** What the server sent back (the upstream's JSON report), or resolved addresses. */
  data: string;
  ms: number;
}

function finish(t0: number, ok: boolean, code: string | null, data: string): ProbeResult {
  return { ok, code, data, ms: Math.round((performance.now() - t0) * 10) / 10 };
}

function stream(
  p: Probe & { host: string; port: number },
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
    s.on('end', () => done(finish(t0, data.length > 0, data.length > 0 ? null : 'EOF', data)));
  });
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

async function lookup(name: string, server?: string): Promise<ProbeResult> {
  const t0 = performance.now();
  try {
    if (server) {
      // c-ares over UDP straight to `server`: what a DNS tunnel to an arbitrary resolver looks like.
      const r = new dns.promises.Resolver({ timeout: 1500, tries: 1 });
      r.setServers([server]);
      const a = await r.resolve4(name);
      return finish(t0, true, null, a.join(','));
    }
    const all = await dns.promises.lookup(name, { all: true });
    return finish(t0, true, null, all.map((a) => a.address).join(','));
  } catch (e) {
    return finish(t0, false, (e as NodeJS.ErrnoException).code ?? 'ERR', '');
  }
}

/** An A (or `qtype`) query for `name` (id 0x1234, recursion desired). */
function dnsQuery(name: string, qtype = 1): Buffer {
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
function dnsAnswer(t0: number, msg: Buffer, qtype = 1): ProbeResult {
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

function rawUdp53(server: string, hex: string): Promise<ProbeResult> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const sock = dgram.createSocket(net.isIPv6(server) ? 'udp6' : 'udp4');
    const timer = setTimeout(() => done(finish(t0, true, null, '')), 1000);
    const done = (r: ProbeResult) => {
      clearTimeout(timer);
      sock.close();
      resolve(r);
    };
    sock.on('error', (e: NodeJS.ErrnoException) => done(finish(t0, false, e.code ?? 'ERR', '')));
    sock.on('message', (msg: Buffer) => done(finish(t0, true, null, msg.toString('hex'))));
    sock.send(Buffer.from(hex, 'hex'), 53, server, (err) => {
      const e = err as NodeJS.ErrnoException | null;
      if (e) done(finish(t0, false, e.code ?? 'ERR', ''));
    });
  });
}

function dnsUdp(server: string, name: string, qtype = 1): Promise<ProbeResult> {
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

function dnsTcp(server: string, name: string): Promise<ProbeResult> {
  const t0 = performance.now();
  const q = dnsQuery(name);
  const len = Buffer.alloc(2);
  len.writeUInt16BE(q.length);
  return new Promise((resolve) => {
    let acc = Buffer.alloc(0);
    const s = net.connect(53, server, () => s.write(Buffer.concat([len, q])));
    const timer = setTimeout(() => done(finish(t0, false, 'ETIMEDOUT', '')), 5000);
    const done = (r: ProbeResult) => {
      clearTimeout(timer);
      s.destroy();
      resolve(r);
    };
    s.on('data', (d: Buffer) => {
      acc = Buffer.concat([acc, d]);
      if (acc.length >= 2 && acc.length >= 2 + acc.readUInt16BE(0)) {
        done(dnsAnswer(t0, acc.subarray(2)));
      }
    });
    s.on('error', (e: NodeJS.ErrnoException) => done(finish(t0, false, e.code ?? 'ERR', '')));
    s.on('end', () => done(finish(t0, false, 'EOF', '')));
  });
}

function flood(p: { host: string; port: number; count: number; holdMs: number }): Promise<ProbeResult> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const socks: net.Socket[] = [];
    let refused = 0;
    let errors = 0;
    for (let i = 0; i < p.count; i++) {
      const s = net.connect(p.port, p.host);
      let gone = false;
      const fail = (e?: NodeJS.ErrnoException) => {
        if (gone) return;
        gone = true;
        if (e && e.code !== 'ECONNRESET' && e.code !== 'EPIPE') errors++;
        else refused++;
      };
      s.on('error', fail);
      s.on('close', () => fail());
      socks.push(s);
    }
    setTimeout(() => {
      const open = socks.filter((s) => !s.destroyed && s.readyState === 'open').length;
      for (const s of socks) s.destroy();
      resolve(finish(t0, true, null, JSON.stringify({ open, refused, errors })));
    }, p.holdMs);
  });
}

export async function runProbe(p: Probe): Promise<ProbeResult> {
  switch (p.kind) {
    case 'flood':
      return flood(p);
    case 'tls':
      return stream(
        p,
        () =>
          tls.connect({
            host: p.host,
            port: p.port,
            servername: p.servername,
            rejectUnauthorized: false,
            ...(p.localPort ? { localPort: p.localPort } : {}),
          }),
        null,
      );
    case 'http':
      return stream(
        p,
        () => net.connect(p.port, p.host),
        `GET / HTTP/1.1\r\nHost: ${p.hostHeader}\r\nConnection: close\r\n\r\n`,
      );
    case 'tcp':
      return stream(
        p,
        () => net.connect({ port: p.port, host: p.host, ...(p.localPort ? { localPort: p.localPort } : {}) }),
        p.hex !== undefined ? Buffer.from(p.hex, 'hex') : (p.send ?? ''),
        p.firstData,
      );
    case 'udp':
      return udp(p);
    case 'dns':
      return lookup(p.name);
    case 'dnsserver':
      return lookup(p.name, p.server);
    case 'dnstcp':
      return dnsTcp(p.server, p.name);
    case 'dnsudp':
      return dnsUdp(p.server, p.name, p.qtype);
    case 'rawudp53':
      return rawUdp53(p.server, p.hex);
  }
}

async function main(): Promise<void> {
  const probes = JSON.parse(process.argv[2] ?? '[]') as Probe[];
  const out: ProbeResult[] = [];
  for (const p of probes) out.push(await runProbe(p));
  process.stdout.write(JSON.stringify({ uid: process.getuid?.(), results: out }) + '\n');
}

if (process.argv[1] && import.meta.url.endsWith('/' + process.argv[1].split('/').pop()!)) {
  main().catch((e: unknown) => {
    process.stderr.write(String(e) + '\n');
    process.exit(1);
  });
}
