/**
 * The measuring client of bench/proxy.ts, run inside the agent namespace as the account whose path is measured
 * (root = direct, the leashed account = through Leash, another account = through nginx).
 *   node proxy-client.js bulk  <host> <port> <helloHexFile>       -> {bytes, ms, busyS, clientS}
 *   node proxy-client.js conns <host> <port> <sni> <concurrency> <ms> -> {count, errors, ms}
 *   node proxy-client.js setup <host> <port> <sni> <n>             -> {samples: number[] (ms)}
 */
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';

/**
 * The whole machine's busy CPU time so far, in seconds (every CPU, every process and interrupt: /proc/stat's first line
 * less idle and iowait). Read around the transfer itself, it charges each path with all the work its bytes cause:
 * the sender, the receiver, the proxy and the kernel's work for each TCP connection on the way.
 */
function busySeconds(): number {
  const f = fs.readFileSync('/proc/stat', 'utf8');
  const v = f.slice(0, f.indexOf('\n')).trim().split(/\s+/).slice(1).map(Number);
  const total = v.slice(0, 8).reduce((a, b) => a + b, 0); // user..steal (guest time is already in user)
  return (total - v[3]! - v[4]!) / 100; // less idle and iowait; USER_HZ 100
}

function bulk(
  host: string,
  port: number,
  hello: Buffer,
): Promise<{ bytes: number; ms: number; busyS: number; clientS: number }> {
  return new Promise((resolve, reject) => {
    const b0 = busySeconds();
    const u0 = process.cpuUsage();
    const t0 = performance.now();
    let bytes = 0;
    const s = net.connect(port, host, () => s.write(hello));
    s.on('data', (d: Buffer) => (bytes += d.length));
    s.on('error', reject);
    s.on('end', () => {
      const ms = performance.now() - t0;
      const u = process.cpuUsage(u0);
      resolve({ bytes, ms, busyS: busySeconds() - b0, clientS: (u.user + u.system) / 1e6 });
      s.destroy();
    });
  });
}

function handshake(host: string, port: number, servername: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const s = tls.connect({ host, port, servername, rejectUnauthorized: false });
    s.once('secureConnect', () => {
      const ms = performance.now() - t0;
      s.destroy();
      resolve(ms);
    });
    s.once('error', (e) => {
      s.destroy();
      reject(e);
    });
  });
}

async function conns(host: string, port: number, sni: string, conc: number, dur: number) {
  const t0 = performance.now();
  let count = 0;
  let errors = 0;
  const worker = async () => {
    while (performance.now() - t0 < dur) {
      try {
        await handshake(host, port, sni);
        count++;
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: conc }, worker));
  return { count, errors, ms: performance.now() - t0 };
}

async function setup(host: string, port: number, sni: string, n: number) {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) samples.push(await handshake(host, port, sni));
  return { samples };
}

async function main(): Promise<void> {
  const [mode, host, portS, a, b, c] = process.argv.slice(2);
  const port = Number(portS);
  let out: unknown;
  if (mode === 'bulk') out = await bulk(host!, port, Buffer.from(fs.readFileSync(a!, 'utf8').trim(), 'hex'));
  else if (mode === 'conns') out = await conns(host!, port, a!, Number(b), Number(c));
  else if (mode === 'setup') out = await setup(host!, port, a!, Number(b));
  else throw new Error(`unknown mode ${mode}`);
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e: unknown) => {
  process.stderr.write(`${(e as Error).message}\n`);
  process.exit(1);
});
