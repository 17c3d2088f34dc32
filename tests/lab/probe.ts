/**
 * The probes only tests and benches run, on top of the demo's (src/cli/demo/probe.ts): a chosen source port, raw
 * bytes, a stalled handshake, a connection flood, DNS over TCP, a resolver of the probe's choice, raw datagrams
 * to port 53. Run as the leashed account like the demo's (the lab copies both where the account can read them).
 */
import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';
import tls from 'node:tls';
import {
  dnsAnswer,
  dnsQuery,
  finish,
  isMain,
  probeMain,
  runProbe,
  stream,
  type Probe as DemoProbe,
  type ProbeResult,
} from '../../src/cli/demo/probe.js';

export type { ProbeResult };

export type Probe =
  | Exclude<DemoProbe, { kind: 'tls' | 'tcp' }>
  /** `localPort`: the source port to connect from (an attacker choosing one that a conntrack entry still holds). */
  | { kind: 'tls'; host: string; port: number; servername?: string; localPort?: number }
  /** `hex`: raw bytes to send instead of `send`; `firstData`: done at the first bytes back (a handshake that stalls). */
  | { kind: 'tcp'; host: string; port: number; send?: string; hex?: string; firstData?: boolean; localPort?: number }
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

/** c-ares over UDP straight to `server`: what a DNS tunnel to an arbitrary resolver looks like. */
async function lookupVia(name: string, server: string): Promise<ProbeResult> {
  const t0 = performance.now();
  try {
    const r = new dns.promises.Resolver({ timeout: 1500, tries: 1 });
    r.setServers([server]);
    const a = await r.resolve4(name);
    return finish(t0, true, null, a.join(','));
  } catch (e) {
    return finish(t0, false, (e as NodeJS.ErrnoException).code ?? 'ERR', '');
  }
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

export async function runLabProbe(p: Probe): Promise<ProbeResult> {
  switch (p.kind) {
    case 'flood':
      return flood(p);
    case 'dnsserver':
      return lookupVia(p.name, p.server);
    case 'dnstcp':
      return dnsTcp(p.server, p.name);
    case 'rawudp53':
      return rawUdp53(p.server, p.hex);
    case 'tls':
      if (!p.localPort) return runProbe(p);
      return stream(
        p,
        () =>
          tls.connect({
            host: p.host,
            port: p.port,
            servername: p.servername,
            rejectUnauthorized: false,
            // Not in tls.ConnectionOptions' type, but passed on to net.connect.
            ...{ localPort: p.localPort },
          }),
        null,
      );
    case 'tcp':
      return stream(
        p,
        () => net.connect({ port: p.port, host: p.host, ...(p.localPort ? { localPort: p.localPort } : {}) }),
        p.hex !== undefined ? Buffer.from(p.hex, 'hex') : (p.send ?? ''),
        p.firstData,
      );
    default:
      return runProbe(p);
  }
}

if (isMain(import.meta.url)) {
  probeMain(runLabProbe).catch((e: unknown) => {
    process.stderr.write(String(e) + '\n');
    process.exit(1);
  });
}
