/**
 * The client of bench/soak.ts, run in the agent namespace as the leashed account.
 *   node soak-client.js hold  <host> <port> <sni> <n> <ms> <churnPerSec> -> {opened, errors, minOpen, pings}
 *     n long-lived TLS connections (opened 100 at a time), each echoing a ping every 2 s; every second `churn` of them are closed and
 *     replaced. An error is a failed handshake, a reset, or a connection that closed or stopped echoing unasked.
 *   node soak-client.js burst <host> <port> <sni> <n> <ms>                -> {ok, refused, errors}
 *     n TLS handshakes started at once; how many completed, were refused (reset/closed), or failed otherwise.
 *   node soak-client.js first <host> <port> <sni>                         -> {ms}  the first handshake that works
 *   node soak-client.js fail  <host> <port> <n>                           -> {refused}  n connects to a dead port
 */
import net from 'node:net';
import tls from 'node:tls';

function open(host: string, port: number, servername: string): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host, port, servername, rejectUnauthorized: false });
    const t = setTimeout(() => {
      s.destroy();
      reject(new Error('handshake timeout'));
    }, 10_000);
    s.once('secureConnect', () => {
      clearTimeout(t);
      resolve(s);
    });
    s.once('error', (e) => {
      clearTimeout(t);
      s.destroy();
      reject(e);
    });
  });
}

async function hold(host: string, port: number, sni: string, n: number, ms: number, churn: number) {
  const t0 = Date.now();
  let opened = 0;
  let errors = 0;
  let pings = 0;
  let minOpen = Infinity;
  const live = new Set<tls.TLSSocket>();
  const start = async (): Promise<void> => {
    try {
      const s = await open(host, port, sni);
      opened++;
      live.add(s);
      let waiting = false;
      const timer = setInterval(() => {
        if (waiting) {
          errors++; // no echo within 2 s
          s.destroy();
          return;
        }
        waiting = true;
        s.write('ping');
      }, 2000);
      s.on('data', () => {
        waiting = false;
        pings++;
      });
      s.on('close', () => {
        clearInterval(timer);
        if (live.delete(s) && Date.now() - t0 < ms) {
          errors++; // closed without being asked
          void start();
        }
      });
      s.on('error', () => {});
    } catch {
      errors++;
    }
  };
  // Opened 100 at a time: the phase is about holding 1,000, not about opening them at once (the burst is). All
  // 1,000 started together, the client's own handshakes on a loaded 2-vCPU machine ran past its 10 s time-out.
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(100, n) }, async () => {
      while (next < n) {
        next++;
        await start();
      }
    }),
  );
  while (Date.now() - t0 < ms) {
    await new Promise((r) => setTimeout(r, 1000));
    minOpen = Math.min(minOpen, live.size);
    const victims = [...live].slice(0, churn);
    for (const v of victims) {
      live.delete(v);
      v.destroy();
    }
    await Promise.all(victims.map(() => start()));
  }
  for (const s of live) s.destroy();
  live.clear();
  return { opened, errors, minOpen, pings };
}

async function burst(host: string, port: number, sni: string, n: number, ms: number) {
  let ok = 0;
  let refused = 0;
  let errors = 0;
  const socks: tls.TLSSocket[] = [];
  await Promise.all(
    Array.from({ length: n }, () =>
      open(host, port, sni).then(
        (s) => {
          ok++;
          socks.push(s);
          s.on('error', () => {});
        },
        (e: NodeJS.ErrnoException) => {
          if (e.code === 'ECONNRESET' || e.code === 'EPIPE' || /socket disconnected/.test(e.message)) refused++;
          else errors++;
        },
      ),
    ),
  );
  await new Promise((r) => setTimeout(r, ms));
  for (const s of socks) s.destroy();
  return { ok, refused, errors };
}

async function first(host: string, port: number, sni: string) {
  const t0 = Date.now();
  for (;;) {
    try {
      (await open(host, port, sni)).destroy();
      return { ms: Date.now() - t0 };
    } catch {
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

async function fail(host: string, port: number, n: number) {
  let refused = 0;
  for (let i = 0; i < n; i += 50) {
    await Promise.all(
      Array.from(
        { length: Math.min(50, n - i) },
        () =>
          new Promise<void>((resolve) => {
            const s = net.connect(port, host);
            s.on('error', () => (refused++, resolve()));
            s.on('close', () => resolve());
          }),
      ),
    );
  }
  return { refused };
}

async function main(): Promise<void> {
  const [mode, host, portS, a, b, c, d] = process.argv.slice(2);
  const port = Number(portS);
  let out: unknown;
  if (mode === 'hold') out = await hold(host!, port, a!, Number(b), Number(c), Number(d));
  else if (mode === 'burst') out = await burst(host!, port, a!, Number(b), Number(c));
  else if (mode === 'first') out = await first(host!, port, a!);
  else if (mode === 'fail') out = await fail(host!, port, Number(a));
  else throw new Error(`unknown mode ${mode}`);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
}

main().catch((e: unknown) => {
  process.stderr.write(`${(e as Error).message}\n`);
  process.exit(1);
});
