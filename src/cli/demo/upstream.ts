/**
 * The lab's "internet": run inside the upstream namespace (`ip netns exec <ns> node upstream.js <config.json>`).
 * HTTP (80, 8080) and TLS (443, 8443) servers answer any Host/SNI with a JSON report of the name and the local
 * address the connection reached, so a test can prove where the proxy really connected. A small DNS server
 * (UDP and TCP port 53) answers A/AAAA for the lab names. Prints "ready" when everything listens. The servers
 * only tests and benches need are tests/lab/upstream.ts's.
 */
import dgram from 'node:dgram';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { isMain } from './probe.js';

export interface UpstreamConfig {
  cert: string;
  key: string;
  httpPorts: number[];
  tlsPorts: number[];
  /** Addresses the DNS server listens on. */
  dns: string[];
  /** name -> addresses (A and AAAA answers). */
  names: Record<string, string[]>;
}

/** Sees each message the DNS server receives (tests/lab/upstream.ts logs them). */
export type DnsTap = (transport: 'udp' | 'tcp', server: string, from: string | undefined, msg: Buffer) => void;

export function plain(addr: string | undefined): string {
  return (addr ?? '').replace(/^::ffff:/, '');
}

// --- DNS ---------------------------------------------------------------------------------------------------------

export function readName(msg: Buffer, off: number): { name: string; next: number } | null {
  const labels: string[] = [];
  let p = off;
  while (p < msg.length) {
    const len = msg[p]!;
    if (len === 0) return { name: labels.join('.').toLowerCase(), next: p + 1 };
    if (len >= 0xc0) return null; // questions are not compressed
    labels.push(msg.toString('latin1', p + 1, p + 1 + len));
    p += 1 + len;
  }
  return null;
}

/** Builds the answer to one query: A/AAAA from `names`, NXDOMAIN for an unknown name. */
export function answerDns(query: Buffer, names: Record<string, string[]>): Buffer | null {
  if (query.length < 12) return null;
  const q = readName(query, 12);
  if (!q || q.next + 4 > query.length) return null;
  const qtype = query.readUInt16BE(q.next);
  const question = query.subarray(12, q.next + 4);
  const addrs = names[q.name.replace(/\.$/, '')];
  const answers: Buffer[] = [];
  for (const a of addrs ?? []) {
    const fam = net.isIP(a);
    if ((qtype === 1 && fam === 4) || (qtype === 28 && fam === 6)) {
      const rdata =
        fam === 4
          ? Buffer.from(a.split('.').map(Number))
          : Buffer.from(
              expand6(a)
                .match(/../g)!
                .map((h) => parseInt(h, 16)),
            );
      const rr = Buffer.alloc(12);
      rr.writeUInt16BE(0xc00c, 0);
      rr.writeUInt16BE(qtype, 2);
      rr.writeUInt16BE(1, 4);
      rr.writeUInt32BE(30, 6);
      rr.writeUInt16BE(rdata.length, 10);
      answers.push(rr, rdata);
    }
  }
  const hdr = Buffer.alloc(12);
  query.copy(hdr, 0, 0, 2);
  hdr.writeUInt16BE(0x8180 | (addrs ? 0 : 3), 2);
  hdr.writeUInt16BE(1, 4);
  hdr.writeUInt16BE(answers.length / 2, 6);
  return Buffer.concat([hdr, question, ...answers]);
}

function expand6(a: string): string {
  const [head, tail] = a.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const mid = tail === undefined ? [] : Array(8 - h.length - t.length).fill('0');
  return [...h, ...mid, ...t].map((x) => x.padStart(4, '0')).join('');
}

/** Listens on `port` of every address, IPv4 and IPv6. */
export const listenAll = (srv: net.Server, port: number): Promise<void> =>
  new Promise((r) => srv.listen({ port, host: '::', ipv6Only: false }, r));

/** Starts the HTTP, TLS and DNS servers of `cfg`; resolves once all listen. */
export async function serveUpstream(cfg: UpstreamConfig, tap: DnsTap = () => {}): Promise<void> {
  const listening: Promise<void>[] = [];
  const listen = (srv: net.Server, port: number) => listening.push(listenAll(srv, port));
  for (const port of cfg.httpPorts) {
    const srv = http.createServer((req, res) => {
      const body = JSON.stringify({
        proto: 'http',
        host: req.headers.host ?? null,
        local: plain(req.socket.localAddress),
        port: req.socket.localPort,
      });
      res.writeHead(200, { 'content-type': 'application/json', connection: 'close' });
      res.end(body + '\n');
    });
    listen(srv, port);
  }
  const key = fs.readFileSync(cfg.key);
  const cert = fs.readFileSync(cfg.cert);
  for (const port of cfg.tlsPorts) {
    const srv = tls.createServer({ key, cert }, (s) => {
      const report = {
        proto: 'tls',
        sni: (s as tls.TLSSocket & { servername?: string | false }).servername || null,
        local: plain(s.localAddress),
        port: s.localPort,
      };
      s.on('error', () => {});
      s.end(JSON.stringify(report) + '\n');
    });
    srv.on('tlsClientError', () => {});
    listen(srv, port);
  }
  for (const addr of cfg.dns) {
    const udp = dgram.createSocket(net.isIPv6(addr) ? 'udp6' : 'udp4');
    udp.on('message', (msg, rinfo) => {
      tap('udp', addr, rinfo.address, msg);
      const ans = answerDns(msg, cfg.names);
      if (ans) udp.send(ans, rinfo.port, rinfo.address);
    });
    listening.push(new Promise((r) => udp.bind(53, addr, () => r())));
    const tcp = net.createServer((s) => {
      let acc = Buffer.alloc(0);
      s.on('error', () => {});
      s.on('data', (d: Buffer) => {
        if (acc.length === 0 && d.length < 2) tap('tcp', addr, s.remoteAddress, d);
        acc = Buffer.concat([acc, d]);
        while (acc.length >= 2 && acc.length >= 2 + acc.readUInt16BE(0)) {
          tap('tcp', addr, s.remoteAddress, acc.subarray(2, 2 + acc.readUInt16BE(0)));
          const ans = answerDns(acc.subarray(2, 2 + acc.readUInt16BE(0)), cfg.names);
          acc = acc.subarray(2 + acc.readUInt16BE(0));
          if (ans) {
            const len = Buffer.alloc(2);
            len.writeUInt16BE(ans.length);
            s.write(Buffer.concat([len, ans]));
          }
        }
      });
    });
    listening.push(new Promise((r) => tcp.listen(53, addr, r)));
  }
  await Promise.all(listening);
}

async function main(): Promise<void> {
  await serveUpstream(JSON.parse(fs.readFileSync(process.argv[2]!, 'utf8')) as UpstreamConfig);
  process.stdout.write('ready\n');
}

if (isMain(import.meta.url)) {
  main().catch((e: unknown) => {
    process.stderr.write(`upstream: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  });
}
