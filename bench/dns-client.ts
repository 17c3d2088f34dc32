/**
 * bench/dns's load generator, run inside the agent namespace (as root or a leashed account):
 *   node dns-client.js qps <server> <port> <clients> <ms> [sport]  -> {"answers": n, "lost": n, "errors": n, "ms": t}
 *   node dns-client.js lat <server> <port> <n> [sport]              -> {"us": [latency of each query in µs]}
 * `sport`: the first source port (client i binds sport + i; lat binds sport + 99). Each path of the bench uses its
 * own range, so a socket never inherits the conntrack entry (and so the NAT, or none) another socket left on the
 * same source port (see SPORT in dns.ts).
 * Each client is one UDP socket with one A query for a fresh name under good.lab in flight (a fresh id each time); a query not
 * answered within 500 ms is counted lost and sent again.
 */
import dgram from 'node:dgram';

/** An A query for a fresh name under good.lab (`q<8 hex>.good.lab`): never a cache hit anywhere. */
function query(id: number): Buffer {
  const label = `q${Math.floor(Math.random() * 0xffffffff)
    .toString(16)
    .padStart(8, '0')}`;
  const q = Buffer.concat([
    Buffer.from([0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, label.length]),
    Buffer.from(label),
    Buffer.from('04676f6f64036c61620000010001', 'hex'),
  ]);
  q.writeUInt16BE(id, 0);
  return q;
}

async function qps(server: string, port: number, clients: number, ms: number, sport: number): Promise<void> {
  let answers = 0;
  let lost = 0;
  let errors = 0;
  const codes: Record<string, number> = {};
  const end = performance.now() + ms;
  const one = (i: number) =>
    new Promise<void>((resolve) => {
      const s = dgram.createSocket(server.includes(':') ? 'udp6' : 'udp4');
      if (sport) s.bind(sport + i);
      let id = 0;
      let timer: NodeJS.Timeout | null = null;
      const send = () => {
        if (performance.now() >= end) {
          s.close();
          resolve();
          return;
        }
        id = (id + 1) & 0xffff;
        s.send(query(id), port, server, (err) => {
          if (err) {
            errors++;
            codes[(err as NodeJS.ErrnoException).code ?? 'ERR'] =
              (codes[(err as NodeJS.ErrnoException).code ?? 'ERR'] ?? 0) + 1;
          }
        });
        timer = setTimeout(() => {
          lost++;
          send();
        }, 500);
      };
      s.on('message', (m: Buffer) => {
        if (m.length < 2 || m.readUInt16BE(0) !== id) return;
        if (timer) clearTimeout(timer);
        answers++;
        send();
      });
      s.on('error', () => {});
      send();
    });
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, (_, i) => one(i)));
  process.stdout.write(JSON.stringify({ answers, lost, errors, codes, ms: performance.now() - t0 }) + '\n');
}

async function lat(server: string, port: number, n: number, sport: number): Promise<void> {
  const s = dgram.createSocket(server.includes(':') ? 'udp6' : 'udp4');
  if (sport) s.bind(sport + 99);
  const us: number[] = [];
  let misses = 0;
  for (let i = 0; i < n; i++) {
    const id = (i + 1) & 0xffff;
    const t0 = performance.now();
    const ok = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        s.off('message', on);
        resolve(false);
      }, 500);
      const on = (m: Buffer) => {
        if (m.length < 2 || m.readUInt16BE(0) !== id) return;
        clearTimeout(timer);
        s.off('message', on);
        resolve(true);
      };
      s.on('message', on);
      s.send(query(id), port, server);
    });
    if (ok) us.push((performance.now() - t0) * 1000);
    else if (++misses > 20) break; // a dead path: say so rather than wait 500 ms a query
  }
  s.close();
  process.stdout.write(JSON.stringify({ us }) + '\n');
}

const [mode, server, port, a, b, c] = process.argv.slice(2);
const run =
  mode === 'qps'
    ? qps(server!, Number(port), Number(a), Number(b), Number(c ?? 0))
    : lat(server!, Number(port), Number(a), Number(b ?? 0));
run.catch((e: unknown) => {
  process.stderr.write(String(e) + '\n');
  process.exit(1);
});
