import net from 'node:net';
import tls from 'node:tls';
import { parseClientHello } from '../dataplane/network/proxy/peek.js';

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

/**
 * A ClientHello (one record, as `captureHello` returns it) with one more extension appended, every length
 * (record, handshake, extensions) fixed up: e.g. encrypted_client_hello (0xfe0d) for the ECH tests.
 */
export function withExtension(hello: Buffer, type: number, body: Buffer): Buffer {
  if (hello[0] !== 0x16 || hello[5] !== 0x01) throw new Error('not a single-record ClientHello');
  const hs = Buffer.from(hello.subarray(5, 5 + hello.readUInt16BE(3)));
  // body: version(2) random(32) session_id<1> cipher_suites<2> compression<1> extensions<2>
  let p = 4 + 34;
  p += 1 + hs[p]!;
  p += 2 + hs.readUInt16BE(p);
  p += 1 + hs[p]!;
  const extLen = hs.readUInt16BE(p);
  const ext = Buffer.alloc(4 + body.length);
  ext.writeUInt16BE(type, 0);
  ext.writeUInt16BE(body.length, 2);
  body.copy(ext, 4);
  const out = Buffer.concat([hs.subarray(0, p + 2 + extLen), ext, hs.subarray(p + 2 + extLen)]);
  out.writeUInt16BE(extLen + ext.length, p);
  const hsLen = out.length - 4;
  out[1] = (hsLen >> 16) & 0xff;
  out.writeUInt16BE(hsLen & 0xffff, 2);
  const rec = Buffer.alloc(5);
  hello.copy(rec, 0, 0, 3);
  rec.writeUInt16BE(out.length, 3);
  return Buffer.concat([rec, out]);
}
