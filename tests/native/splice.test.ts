import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSplicePump, stopReading, type SplicePump } from '../../src/dataplane/network/proxy/splice.js';
import { loadNative, nativeAvailable } from '../../src/native.js';

/** A connected pair of sockets on loopback: [client end, server end]. */
async function socketPair(): Promise<[net.Socket, net.Socket]> {
  const srv = net.createServer({ allowHalfOpen: true, pauseOnConnect: true });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const accepted = new Promise<net.Socket>((r) => srv.once('connection', r));
  const c = net.connect({ port: (srv.address() as net.AddressInfo).port, host: '127.0.0.1', allowHalfOpen: true });
  await new Promise<void>((r) => c.once('connect', () => r()));
  const s = await accepted;
  srv.close();
  return [c, s];
}

function readAll(s: net.Socket): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    s.on('data', (d: Buffer) => parts.push(d));
    s.on('end', () => resolve(Buffer.concat(parts)));
    s.on('error', reject);
    s.resume(); // accepted with pauseOnConnect: a 'data' listener alone does not start the flow
  });
}

/** Collects what `s` receives until `n` bytes have come or `ms` have passed (no end is waited for). */
function readUpTo(s: net.Socket, n: number, ms: number): Promise<Buffer> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let got = 0;
    const finish = () => {
      clearTimeout(t);
      s.off('data', onData);
      resolve(Buffer.concat(parts));
    };
    const onData = (d: Buffer) => {
      parts.push(d);
      got += d.length;
      if (got >= n) finish();
    };
    const t = setTimeout(finish, ms);
    s.on('data', onData);
    s.resume();
  });
}

// An upstream that sends TCP urgent data (Node cannot: MSG_OOB): `pre` bytes of 'x', after `pauseS` seconds the
// urgent byte '!' and then 'after', and holds the connection open (no FIN, so nothing after it makes a new edge).
const URGENT_SERVER = `
import socket, sys, time
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
s.sendall(b'x' * int(sys.argv[2]))
time.sleep(float(sys.argv[3]))
s.send(b'!', socket.MSG_OOB)
s.sendall(b'after')
print('sent', flush=True)
time.sleep(30)
`;

/** [b, the python upstream]: b is the proxy-side end of a connection whose far side sends urgent data. */
async function urgentUpstream(pre: number, pauseS: number): Promise<[net.Socket, ChildProcess, Promise<void>]> {
  const srv = net.createServer({ allowHalfOpen: true, pauseOnConnect: true });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const accepted = new Promise<net.Socket>((r) => srv.once('connection', r));
  const py = spawn(
    'python3',
    ['-c', URGENT_SERVER, String((srv.address() as net.AddressInfo).port), String(pre), String(pauseS)],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const sent = new Promise<void>((resolve, reject) => {
    py.stdout!.once('data', () => resolve());
    py.once('error', reject); // no python3: the test fails saying so
  });
  const b = await Promise.race([accepted, sent.then(() => accepted)]);
  srv.close();
  return [b, py, sent];
}

// The pump joins a "client" socket pair and an "upstream" socket pair at their proxy-side ends:
//   agent <-> [a] ==splice== [b] <-> server
describe.skipIf(!nativeAvailable()).each([
  { inline: true, name: "on Node's loop" },
  { inline: false, name: 'on a thread of its own' },
])('splice pump ($name)', ({ inline }) => {
  let pump: SplicePump;
  beforeAll(() => {
    pump = createSplicePump({ inline })!;
    expect(pump).not.toBeNull();
  });
  afterAll(() => pump?.close());

  async function joined() {
    const [agent, a] = await socketPair();
    const [b, server] = await socketPair();
    stopReading(a);
    stopReading(b);
    const { id, done } = pump.start(a, b);
    return { agent, server, a, b, id, done };
  }

  it('moves 64 MiB each way intact, with a half-close passed on in each direction', async () => {
    const { agent, server, a, b, done } = await joined();
    const up = crypto.randomBytes(64 << 20);
    const down = crypto.randomBytes(64 << 20);
    const gotAtServer = readAll(server);
    const gotAtAgent = readAll(agent);
    agent.end(up);
    // The server answers only after the agent's FIN arrived: the other direction must still be open.
    const received = await gotAtServer;
    server.end(down);
    expect(crypto.createHash('sha256').update(received).digest('hex')).toBe(
      crypto.createHash('sha256').update(up).digest('hex'),
    );
    const back = await gotAtAgent;
    expect(back.equals(down)).toBe(true);
    const r = await done;
    expect(r).toEqual({ error: null, ab: up.length, ba: down.length, connected: true, closed: false });
    a.destroy();
    b.destroy();
    agent.destroy();
    server.destroy();
  });

  // A direction starts by copying (recv/send) and turns to splice once a read fills its buffer; a short read
  // ends a turn with no read to EAGAIN, so a FIN that came with the last bytes must not be left unseen.
  it('an echo of 300 messages of 1 B to 40 KiB arrives whole, each one in turn (copy, then splice)', async () => {
    const { agent, server, a, b, done } = await joined();
    server.on('data', (d: Buffer) => server.write(d));
    server.on('end', () => server.end());
    server.resume();
    const sizes = Array.from({ length: 300 }, (_, i) => (i % 3 === 0 ? 1 + (i % 17) : 1 + ((i * 7919) % 40000)));
    let got = Buffer.alloc(0);
    agent.on('data', (d: Buffer) => (got = Buffer.concat([got, d])));
    let sent = 0;
    for (const n of sizes) {
      const msg = crypto.randomBytes(n);
      agent.write(msg);
      sent += n;
      while (got.length < sent) await new Promise((r) => setImmediate(r));
      expect(got.subarray(sent - n, sent).equals(msg)).toBe(true);
    }
    const ended = new Promise((r) => agent.once('end', r));
    agent.end();
    agent.resume();
    await ended;
    const r = await done;
    expect(r).toEqual({ error: null, ab: sent, ba: sent, connected: true, closed: false });
    for (const s of [a, b, agent, server]) s.destroy();
  });

  it('bytes and the FIN that came with them, queued before the pump starts, are both passed on', async () => {
    const [agent, a] = await socketPair();
    const [b, server] = await socketPair();
    agent.end('last words');
    await new Promise((r) => setTimeout(r, 30)); // data and FIN both queued in `a`: one event, no later edge
    stopReading(a);
    stopReading(b);
    const gotAtServer = readAll(server);
    const { done } = pump.start(a, b);
    expect((await gotAtServer).toString()).toBe('last words');
    server.end('reply');
    expect((await readAll(agent)).toString()).toBe('reply');
    expect(await done).toEqual({ error: null, ab: 10, ba: 5, connected: true, closed: false });
    for (const s of [a, b, agent, server]) s.destroy();
  });

  it('a reader that waits: 8 MiB written 1000 bytes at a time arrive whole and in order', async () => {
    const { agent, server, a, b, done } = await joined();
    const data = crypto.randomBytes(8 << 20);
    server.pause();
    for (let off = 0; off < data.length; off += 1000) agent.write(data.subarray(off, off + 1000));
    agent.end();
    await new Promise((r) => setTimeout(r, 200)); // the upstream's buffers fill; the pump holds what it cannot send
    const received = await readAll(server);
    expect(received.length).toBe(data.length);
    expect(received.equals(data)).toBe(true);
    server.end();
    await readAll(agent);
    expect((await done).ab).toBe(data.length);
    for (const s of [a, b, agent, server]) s.destroy();
  });

  it('reports a reset on one side as ECONNRESET', async () => {
    const { agent, server, a, b, done } = await joined();
    server.on('error', () => {});
    agent.on('error', () => {});
    agent.write('hello');
    server.resume();
    await new Promise((r) => server.once('data', r));
    server.resetAndDestroy();
    agent.write('more after the reset');
    const r = await done;
    expect(['ECONNRESET', 'EPIPE']).toContain(r.error);
    a.destroy();
    b.destroy();
    agent.destroy();
  });

  // Reads stop at an urgent mark: recv() returns what is before it and skips the urgent byte on the next call, and
  // splice(2) never reads past it. Without EPOLLPRI handling the rest stayed in the socket for good.
  /**
   * Joins an agent pair with an upstream sending urgent data (see urgentUpstream), the pump started before the
   * upstream sends (`queued` false) or after all of it is queued in `b`; returns what the agent received within
   * `ms`. The pair is aborted and awaited before its sockets are destroyed, also when something fails. With `holdMs`
   * the agent reads nothing until the upstream has sent everything or that long has passed.
   */
  async function throughUrgent(pre: number, pauseS: number, queued: boolean, ms: number, holdMs = 0): Promise<Buffer> {
    const [agent, a] = await socketPair();
    const [b, py, sent] = await urgentUpstream(pre, pauseS);
    let started: { id: number; done: Promise<unknown> } | null = null;
    try {
      if (queued) {
        await sent;
        await new Promise((r) => setTimeout(r, 50)); // all of it queued in `b`: one event, no later edge
      }
      stopReading(a);
      stopReading(b);
      started = pump.start(a, b);
      if (holdMs > 0) await Promise.race([sent, new Promise((r) => setTimeout(r, holdMs))]);
      const got = readUpTo(agent, pre + 5, ms);
      await sent;
      return await got;
    } finally {
      if (started) {
        pump.abort(started.id);
        await started.done;
      }
      py.kill();
      for (const s of [a, b, agent]) s.destroy();
    }
  }

  it('TCP urgent data queued before the pump starts: the bytes on both sides of the mark arrive (copy mode)', async () => {
    // The urgent byte is out of band and not relayed; 'after' must not wait for more bytes that never come.
    expect((await throughUrgent(5, 0, true, 2000)).toString()).toBe('xxxxxafter');
  });

  it('TCP urgent data on a direction that splices: the bytes after the mark arrive', async () => {
    const all = await throughUrgent(256 * 1024, 0.3, false, 3000);
    expect(all.length).toBe(256 * 1024 + 5);
    expect(all.subarray(-6).toString()).toBe('xafter');
  });

  it('TCP urgent data while the direction waits to write (agent not reading): the bytes after the mark arrive', async () => {
    // The pump stops listening to a socket whose direction is blocked on its other end, so it does not see the
    // urgent data arrive; the bytes after the mark must still come once the agent reads again.
    const pre = 12 << 20;
    const all = await throughUrgent(pre, 0.3, false, 5000, 1500);
    expect(all.length).toBe(pre + 5);
    expect(all.subarray(-6).toString()).toBe('xafter');
  });

  it('abort finishes a pair at once with ECANCELED', async () => {
    const { agent, server, a, b, id, done } = await joined();
    pump.abort(id);
    expect((await done).error).toBe('ECANCELED');
    for (const s of [a, b, agent, server]) s.destroy();
  });

  it('bytes read by Node before the hand-over are returned by stopReading, not lost', async () => {
    const [agent, a] = await socketPair();
    a.resume();
    agent.write('early bytes');
    await new Promise((r) => setTimeout(r, 50));
    a.removeAllListeners('data');
    a.pause();
    agent.write(' and later');
    await new Promise((r) => setTimeout(r, 50));
    // 'early bytes' went to a flowing stream with no listener; what matters is that nothing after pause() is lost.
    const rest = stopReading(a);
    expect(rest.toString()).toBe(' and later');
    agent.destroy();
    a.destroy();
  });

  it('connect(): what the client sent before is delivered first, then both ways; the descriptors stay open', async () => {
    const srv = net.createServer({ allowHalfOpen: true });
    const got = new Promise<Buffer>((resolve) =>
      srv.once('connection', (s) => {
        const parts: Buffer[] = [];
        s.on('data', (d: Buffer) => {
          parts.push(d);
          if (Buffer.concat(parts).toString() === 'hello upstream') s.end('hello agent');
        });
        s.on('end', () => resolve(Buffer.concat(parts)));
      }),
    );
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const [agent, a] = await socketPair();
    agent.write('hello upstream');
    await new Promise((r) => setTimeout(r, 20)); // queued in `a` before the pump starts
    stopReading(a);
    const fd = (a as unknown as { _handle: { fd: number } })._handle.fd;
    const { upFd, done } = pump.connect(fd, '127.0.0.1', (srv.address() as net.AddressInfo).port, 5000);
    expect(upFd).toBeGreaterThan(2);
    const back = await new Promise<string>((resolve) => {
      let s = '';
      agent.on('data', (d: Buffer) => {
        s += d.toString();
        if (s === 'hello agent') resolve(s);
      });
    });
    expect(back).toBe('hello agent');
    agent.end();
    expect((await got).toString()).toBe('hello upstream');
    const r = await done;
    expect(r).toEqual({ error: null, ab: 14, ba: 11, connected: true, closed: false });
    // The pump closed neither: the caller does.
    expect(fs.fstatSync(upFd).isSocket()).toBe(true);
    fs.closeSync(upFd);
    a.destroy();
    agent.destroy();
    srv.close();
  });

  it('connect(): a server that speaks first is heard while the client has sent nothing', async () => {
    const srv = net.createServer((s) => s.end('220 banner\r\n'));
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const [agent, a] = await socketPair();
    stopReading(a);
    const fd = (a as unknown as { _handle: { fd: number } })._handle.fd;
    const { upFd, done } = pump.connect(fd, '127.0.0.1', (srv.address() as net.AddressInfo).port, 5000);
    expect((await readAll(agent)).toString()).toBe('220 banner\r\n');
    agent.end();
    expect(await done).toEqual({ error: null, ab: 0, ba: 12, connected: true, closed: false });
    fs.closeSync(upFd);
    a.destroy();
    agent.destroy();
    srv.close();
  });

  it('connect(closeOnClean): a pair that ends cleanly has both descriptors closed by the pump', async () => {
    const srv = net.createServer({ allowHalfOpen: true }, (s) => {
      s.on('data', () => {});
      s.on('end', () => s.end('bye'));
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    // A descriptor no net.Socket owns, as the proxy's native acceptor hands over.
    const { Acceptor } = loadNative();
    let release: (fd: number) => void = () => {};
    const got = new Promise<number>((r) => (release = r));
    const acceptor = new Acceptor!({
      onAccept: (_tag, id) => release(acceptor.release(id, 0)),
      onPeek: () => true,
      onError: () => {},
    });
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    acceptor.listen('127.0.0.1', port, 16, 1);
    const agent = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const fd = await got;
    const clientInode = fs.readlinkSync(`/proc/self/fd/${fd}`);
    agent.end('hi');
    const { upFd, done } = pump.connect(fd, '127.0.0.1', (srv.address() as net.AddressInfo).port, 5000, true);
    const upInode = fs.readlinkSync(`/proc/self/fd/${upFd}`);
    expect((await readAll(agent)).toString()).toBe('bye');
    expect(await done).toEqual({ error: null, ab: 2, ba: 3, connected: true, closed: true });
    const now = (n: number) => {
      try {
        return fs.readlinkSync(`/proc/self/fd/${n}`);
      } catch {
        return null;
      }
    };
    // Closed (or the number already taken by something else, never the same socket).
    expect(now(fd)).not.toBe(clientInode);
    expect(now(upFd)).not.toBe(upInode);
    acceptor.close();
    agent.destroy();
    srv.close();
  });

  it('connect(): an upstream that never answers the SYN is given up at the time limit, ETIMEDOUT', async () => {
    // A listener that never accepts, its queue filled: the kernel drops further SYNs.
    const py =
      "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(30)\n";
    const { spawn } = await import('node:child_process');
    const child = spawn('python3', ['-c', py], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const port = await new Promise<number>((resolve) =>
        child.stdout.once('data', (b: Buffer) => resolve(Number(String(b).trim()))),
      );
      const fillers: net.Socket[] = [];
      for (let i = 0; i < 3; i++) {
        const f = net.connect(port, '127.0.0.1');
        f.on('error', () => {});
        fillers.push(f);
      }
      await new Promise((r) => setTimeout(r, 100));
      const [agent, a] = await socketPair();
      agent.on('error', () => {});
      stopReading(a);
      const fd = (a as unknown as { _handle: { fd: number } })._handle.fd;
      const t0 = Date.now();
      const { upFd, done } = pump.connect(fd, '127.0.0.1', port, 300);
      const r = await done;
      expect(r).toMatchObject({ error: 'ETIMEDOUT', connected: false, closed: false });
      expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
      fs.closeSync(upFd);
      a.destroy();
      agent.destroy();
      for (const f of fillers) f.destroy();
    } finally {
      child.kill('SIGKILL');
    }
  }, 15000);

  it('connect(): a refused upstream is reported as never connected, ECONNREFUSED', async () => {
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r())); // nothing listens there now
    const [agent, a] = await socketPair();
    agent.on('error', () => {});
    agent.write('x');
    stopReading(a);
    const fd = (a as unknown as { _handle: { fd: number } })._handle.fd;
    const { upFd, done } = pump.connect(fd, '127.0.0.1', port, 5000);
    const r = await done;
    expect(r.connected).toBe(false);
    expect(r.error).toBe('ECONNREFUSED');
    fs.closeSync(upFd);
    a.destroy();
    agent.destroy();
  });
});
