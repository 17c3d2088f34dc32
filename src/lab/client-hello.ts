import net from 'node:net';
import tls from 'node:tls';
import { parseClientHello } from '../enforcers/network/peek.js';

/**
 * Captures the real ClientHello Node's TLS stack sends for `servername` over loopback (no handshake
 * completes), for tests and benchmarks that need genuine TLS bytes.
 */
export async function captureHello(servername: string | undefined, extra: tls.ConnectionOptions = {}): Promise<Buffer> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  const got = new Promise<Buffer>((resolve) => {
    server.on('connection', (s) => {
      let acc = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        acc = Buffer.concat([acc, d]);
        if (parseClientHello(acc).kind !== 'more') {
          resolve(acc);
          s.destroy();
        }
      });
    });
  });
  const c = tls.connect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false, ...extra });
  c.on('error', () => {});
  const hello = await got;
  c.destroy();
  server.close();
  return hello;
}
