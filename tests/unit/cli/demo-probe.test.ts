import net from 'node:net';
import { once } from 'node:events';
import tls from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { stream } from '../../../src/cli/demo/probe.js';

// The probe's TLS client against a server on loopback that refuses before the client has written anything, as the
// proxy does for a connection it refuses at accept (a destination it judges without peeking). The reset then reaches
// the client's first write (its ClientHello): the kernel reports ECONNRESET to that write, Node's TLS layer drops a
// handshake write's error, and the next read sees an orderly end. The probe must still report the reset, and an
// orderly end (a FIN) as EOF.

const servers: net.Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/**
 * A loopback server and a TCP connection to it that reads nothing; once the client is connected the server does
 * `act` to its end, and only then does a TLS client start on the connection: its ClientHello is the first write
 * after what the server did.
 */
async function tlsAfter(act: (s: net.Socket) => void) {
  const srv = net.createServer({ allowHalfOpen: true });
  servers.push(srv);
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const port = (srv.address() as net.AddressInfo).port;
  const accepted = once(srv, 'connection') as Promise<[net.Socket]>;
  const raw = new net.Socket();
  raw.pause();
  raw.connect(port, '127.0.0.1');
  await once(raw, 'connect');
  const [s] = await accepted;
  s.on('error', () => {});
  act(s);
  // The server's segment crosses loopback in softirq right after its call; this is slack for a loaded machine.
  await new Promise((r) => setTimeout(r, 50));
  return stream(
    { kind: 'tls', host: '127.0.0.1', port },
    () => tls.connect({ socket: raw, servername: 'probe.lab', rejectUnauthorized: false }),
    null,
  );
}

describe('leash demo probe: how a refused TLS connection ends', () => {
  it('reports a reset that came before the ClientHello as ECONNRESET, not as an orderly end', async () => {
    expect(await tlsAfter((s) => s.resetAndDestroy())).toMatchObject({ ok: false, code: 'ECONNRESET', data: '' });
  });

  it('still reports an orderly end (the server half-closes and reads on) as EOF', async () => {
    const r = await tlsAfter((s) => {
      s.resume(); // reads the ClientHello: no reset for unread data
      s.end();
    });
    expect(r).toMatchObject({ ok: false, code: 'EOF', data: '' });
  });
});
