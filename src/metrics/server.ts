/**
 * The metrics endpoint: `GET /metrics` in OpenMetrics text, on a unix socket (0600, root's: what
 * `leash status` reads) and, when configured, a loopback TCP port for a Prometheus scraper. Node's
 * own http module: one route, nothing to route.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import type { Metrics } from './metrics.js';

export interface MetricsServer {
  /** Where it listens: the socket path and the `host:port`, when any. */
  readonly socket: string | null;
  readonly listen: string | null;
  close(): Promise<void>;
}

function handler(metrics: Metrics): http.RequestListener {
  return (req, res) => {
    if ((req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    metrics.text().then(
      (body) => res.writeHead(200, { 'content-type': metrics.contentType }).end(req.method === 'HEAD' ? '' : body),
      (e: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`${e.message}\n`),
    );
  };
}

/** True when something answers on the unix socket `p` (a running service's), false for a stale file. */
function answering(p: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = net.connect(p);
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

/** Resolves once `srv` listens; a listen error (EADDRINUSE) rejects rather than reaching no handler. */
export function listenOn(srv: http.Server, where: string | net.ListenOptions): Promise<void> {
  return new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(where, () => {
      srv.off('error', reject);
      resolve();
    });
  });
}

/** Parses `host:port` / `[v6]:port` of a loopback listen address (the schema already refused any other). */
export function parseListen(s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(s);
  if (!m) throw new Error(`metrics.listen must be host:port, not ${JSON.stringify(s)}`);
  return { host: m[1] ?? m[2]!, port: Number(m[3]) };
}

export async function startMetricsServer(
  metrics: Metrics,
  opts: { socket: string | null; listen: string | null },
): Promise<MetricsServer> {
  const servers: http.Server[] = [];
  const closeAll = async () => {
    await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
  };
  try {
    if (opts.socket !== null) {
      const p = opts.socket;
      if (fs.existsSync(p)) {
        if (!fs.lstatSync(p).isSocket()) throw new Error(`${p} exists and is not a socket`);
        if (await answering(p)) throw new Error(`${p} is in use by another process`);
        fs.rmSync(p);
      }
      fs.mkdirSync(p.slice(0, p.lastIndexOf('/')) || '/', { recursive: true, mode: 0o755 });
      const srv = http.createServer(handler(metrics));
      // 0600 before anyone can connect: bound (synchronously, inside listen) under a umask that leaves
      // nothing for others, restored before anything else runs.
      const old = process.umask(0o177);
      let bound: Promise<void>;
      try {
        bound = listenOn(srv, p);
      } finally {
        process.umask(old);
      }
      await bound;
      fs.chmodSync(p, 0o600);
      servers.push(srv);
    }
    if (opts.listen !== null) {
      const { host, port } = parseListen(opts.listen);
      const srv = http.createServer(handler(metrics));
      await listenOn(srv, { host, port, exclusive: true });
      servers.push(srv);
    }
  } catch (e) {
    await closeAll();
    throw e;
  }
  return { socket: opts.socket, listen: opts.listen, close: closeAll };
}

/** Reads the metrics text from a unix socket (`leash status`); null when nothing answers there. */
export function fetchMetrics(socket: string, timeoutMs = 2000): Promise<string | null> {
  return new Promise((resolve) => {
    const req = http.get({ socketPath: socket, path: '/metrics', timeout: timeoutMs }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        resolve(null);
        return;
      }
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => (body += d));
      res.on('end', () => resolve(body));
      res.on('error', () => resolve(null));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
  });
}
