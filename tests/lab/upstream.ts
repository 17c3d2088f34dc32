/**
 * The lab's upstream for tests and benches: the demo's servers (src/cli/demo/upstream.ts) plus a log of every DNS
 * message received (the tests' proof of what left), a TLS port whose connections stay open and echo (soak) and a
 * bulk source (bench/proxy). Run like the demo's: `ip netns exec <ns> node upstream.js <config.json>`.
 */
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { isMain } from '../../src/cli/demo/probe.js';
import { listenAll, plain, readName, serveUpstream, type UpstreamConfig } from '../../src/cli/demo/upstream.js';

export interface LabUpstreamConfig extends UpstreamConfig {
  /** Every message the DNS server receives is appended here as a JSON line. */
  dnsLog?: string;
  /** Soak: a TLS port whose connections stay open and echo what they receive. */
  holdTls?: number;
  /** Bench source: on each connection, after the first bytes arrive, send `bytes` and close (half-open kept). */
  bulk?: { port: number; bytes: number };
}

function bulkServer(bytes: number): net.Server {
  const chunk = Buffer.alloc(1 << 20, 0x61);
  // allowHalfOpen: a client that half-closes after its first bytes still gets all of them (Node would end the
  // socket at the client's FIN, cutting the transfer short).
  return net.createServer({ allowHalfOpen: true }, (s) => {
    s.on('error', () => {});
    s.once('data', () => {
      let left = bytes;
      const pump = () => {
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          left -= n;
          if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void s.once('drain', pump);
        }
        s.end();
      };
      pump();
    });
  });
}

async function main(): Promise<void> {
  const cfg = JSON.parse(fs.readFileSync(process.argv[2]!, 'utf8')) as LabUpstreamConfig;
  const logFd = cfg.dnsLog ? fs.openSync(cfg.dnsLog, 'a') : null;
  const listening = [
    serveUpstream(cfg, (transport, server, from, msg) => {
      if (logFd === null) return;
      const q = msg.length > 12 ? readName(msg, 12) : null;
      const qtype = q && q.next + 2 <= msg.length ? msg.readUInt16BE(q.next) : null;
      const id = msg.length >= 2 ? msg.readUInt16BE(0) : null;
      const rec = { transport, server, from: plain(from), bytes: msg.length, id, name: q?.name ?? null, qtype };
      fs.writeSync(logFd, JSON.stringify(rec) + '\n');
    }),
  ];
  if (cfg.holdTls) {
    const srv = tls.createServer({ key: fs.readFileSync(cfg.key), cert: fs.readFileSync(cfg.cert) }, (s) => {
      s.on('error', () => {});
      s.pipe(s);
    });
    srv.on('tlsClientError', () => {});
    listening.push(listenAll(srv, cfg.holdTls));
  }
  if (cfg.bulk) listening.push(listenAll(bulkServer(cfg.bulk.bytes), cfg.bulk.port));
  await Promise.all(listening);
  process.stdout.write('ready\n');
}

if (isMain(import.meta.url)) {
  main().catch((e: unknown) => {
    process.stderr.write(`lab upstream: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  });
}
