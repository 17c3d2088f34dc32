import dgram from 'node:dgram';
import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createProxy, isAddressRule, type Proxy } from '../../../../src/dataplane/network/proxy/proxy.js';
import type { DecisionRecord } from '../../../../src/log/decisions.js';
import { captureHello, withExtension } from '../../../lab/client-hello.js';
import { answerDns } from '../../../../src/cli/demo/upstream.js';
import type { OriginalDst } from '../../../../src/native.js';
import { compilePolicy, decide, type CompiledPolicy } from '../../../../src/engine/index.js';
import { netPolicy } from '../../../lab/policy.js';

// The proxy on loopback with SO_ORIGINAL_DST faked: every behaviour that does not need the kernel's redirect.
// (tests/integration/network*.test.ts repeat the security-relevant ones with real nft rules as a real account.)

let upstream: http.Server;
let upPort: number;
let echo: net.Server;
let echoPort: number;
let banner: net.Server;
let bannerPort: number;
let dnsSock: dgram.Socket;
let dnsPort: number;
let proxy: Proxy<CompiledPolicy>;
let proxyPort: number;
let fakeDst: OriginalDst | Error;
const lines: DecisionRecord[] = [];
let decideCalls = 0;

function freePort(): Promise<number> {
  return new Promise((r) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => r(p));
    });
  });
}

beforeAll(async () => {
  upstream = http.createServer((req, res) => {
    res.end(JSON.stringify({ host: req.headers.host, local: req.socket.localAddress }));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upPort = (upstream.address() as net.AddressInfo).port;
  // Replies only after the client's FIN: proves a half-close is passed on and the other direction still flows.
  echo = net.createServer({ allowHalfOpen: true }, (s) => {
    const got: Buffer[] = [];
    s.on('error', () => {}); // an early-connected upstream is reset when the name is refused after the peek
    s.on('data', (d: Buffer) => got.push(d));
    s.on('end', () => s.end('got:' + Buffer.concat(got).toString()));
  });
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  echoPort = (echo.address() as net.AddressInfo).port;
  // Speaks first (an SMTP/SSH-like banner), then answers one line and closes.
  banner = net.createServer((s) => {
    s.on('error', () => {});
    s.write('220 banner\r\n');
    s.once('data', () => s.end('221 bye\r\n'));
  });
  await new Promise<void>((r) => banner.listen(0, '127.0.0.1', r));
  bannerPort = (banner.address() as net.AddressInfo).port;
  dnsSock = dgram.createSocket('udp4');
  dnsSock.on('message', (m, r) => {
    const a = answerDns(m, { 'good.test': ['127.0.0.1'], 'other.test': ['127.0.0.3'] });
    if (a) dnsSock.send(a, r.port, r.address);
  });
  await new Promise<void>((r) => dnsSock.bind(0, '127.0.0.1', r));
  dnsPort = dnsSock.address().port;
});

afterAll(async () => {
  upstream?.close();
  echo?.close();
  banner?.close();
  dnsSock?.close();
});

beforeEach(() => {
  lines.length = 0;
  decideCalls = 0;
});

/** Sends `payload` through the proxy; resolves with what came back, or the error code. */
function through(
  payload: string | Buffer | null,
  opts: { end?: boolean } = {},
): Promise<{ data: string; err: string | null; ms: number }> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const c = net.connect(proxyPort, '127.0.0.1');
    let data = '';
    c.on('connect', () => {
      if (payload !== null) c.write(payload);
      if (opts.end) c.end();
    });
    c.on('data', (d) => (data += d.toString()));
    c.on('error', (e: NodeJS.ErrnoException) => resolve({ data, err: e.code ?? 'ERR', ms: Date.now() - t0 }));
    c.on('close', () => resolve({ data, err: null, ms: Date.now() - t0 }));
  });
}

const get = (host: string) => `GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;

describe.each([
  { splice: true, nativeAccept: true, name: 'native acceptor, splice(2) pump' },
  { splice: true, nativeAccept: false, name: 'net.Server, splice(2) pump' },
  { splice: false, nativeAccept: false, name: 'Node pipe' },
])('proxy (loopback, faked original destination, $name)', ({ splice, nativeAccept }) => {
  beforeAll(async () => {
    proxyPort = await freePort();
    proxy = createProxy<CompiledPolicy>({
      decide: (s, subj, p) => {
        decideCalls++;
        return decide(s, subj, p);
      },
      log: { write: (rec) => (lines.push(rec), String(lines.length)) },
      resolvers: [`127.0.0.1:${dnsPort}`],
      hosts: ['127.0.0.1'],
      peekTimeoutMs: 300,
      splice,
      nativeAccept,
      originalDst: () => {
        if (fakeDst instanceof Error) throw fakeDst;
        return fakeDst;
      },
    });
    await proxy.setSubject({
      uid: 4242,
      port: proxyPort,
      policy: compilePolicy(netPolicy({ allow: ['good.test', '127.0.0.0/30'], deny: ['127.0.0.2'] })),
    });
  });
  afterAll(async () => {
    await proxy?.close();
  });

  it('connects a domain-decided allow to the resolved address, not the one the agent supplied', async () => {
    fakeDst = { family: 4, address: '10.9.9.9', port: upPort };
    const r = await through(get(`good.test:${upPort}`));
    expect(r.err).toBeNull();
    expect(r.data).toContain('"local":"127.0.0.1"');
    expect(lines).toEqual([
      expect.objectContaining({
        uid: 4242,
        action: 'allow',
        reason: 'allow_entry',
        rule: 'good.test',
        subject: { domain: 'good.test', ip: '10.9.9.9', port: upPort, upstream: '127.0.0.1' },
      }),
    ]);
  });

  it('0.0.0.0 and :: (a connect there reaches a local service) are judged as localhost, by address', async () => {
    for (const address of ['0.0.0.0', '::']) {
      lines.length = 0;
      fakeDst = { family: address === '::' ? 6 : 4, address, port: upPort };
      const r = await through(get('good.test'));
      expect(r.err).toBe('ECONNRESET');
      expect(lines).toEqual([
        expect.objectContaining({
          action: 'block',
          reason: 'not_allowed',
          subject: expect.objectContaining({ domain: 'localhost', ip: address }),
        }),
      ]);
    }
  });

  it('resets a denied name at once and writes one block line', async () => {
    fakeDst = { family: 4, address: '10.9.9.9', port: upPort };
    const r = await through(get('evil.test'));
    expect(r.err).toBe('ECONNRESET');
    expect(r.ms).toBeLessThan(1000);
    expect(lines).toEqual([expect.objectContaining({ action: 'block', reason: 'not_allowed', uid: 4242 })]);
  });

  it('judges the resolved address too: a deny entry covering it wins', async () => {
    const p2 = compilePolicy(netPolicy({ allow: ['other.test'], deny: ['127.0.0.3'] }));
    await proxy.setSubject({ uid: 4242, port: proxyPort, policy: p2 });
    try {
      fakeDst = { family: 4, address: '10.9.9.9', port: upPort };
      const r = await through(get('other.test'));
      expect(r.err).toBe('ECONNRESET');
      expect(lines[0]).toMatchObject({ action: 'block', reason: 'deny_entry', rule: '127.0.0.3' });
    } finally {
      await proxy.setSubject({
        uid: 4242,
        port: proxyPort,
        policy: compilePolicy(netPolicy({ allow: ['good.test', '127.0.0.0/30'], deny: ['127.0.0.2'] })),
      });
    }
  });

  it('refuses a direct connection to its own listener without consulting the policy', async () => {
    fakeDst = { family: 4, address: '127.0.0.1', port: proxyPort };
    const r = await through(get('good.test'));
    expect(r.err).toBe('ECONNRESET');
    expect(decideCalls).toBe(0);
    expect(lines).toEqual([
      expect.objectContaining({ reason: 'not_redirected', severity: 'critical', action: 'block' }),
    ]);
  });

  it('refuses a loopback destination in the reserved proxy range (another subject port)', async () => {
    fakeDst = { family: 4, address: '127.0.0.1', port: 18555 };
    expect((await through(get('good.test'))).err).toBe('ECONNRESET');
    expect(lines[0]).toMatchObject({ reason: 'not_redirected', severity: 'critical' });
  });

  it('refuses when the original destination cannot be read', async () => {
    fakeDst = Object.assign(new Error('getsockopt'), { code: 'ENOENT' });
    expect((await through(get('good.test'))).err).toBe('ECONNRESET');
    expect(decideCalls).toBe(0);
    expect(lines[0]).toMatchObject({ reason: 'no_original_dst', severity: 'critical' });
  });

  it('an IP-decided allow goes to the original destination; half-close is passed on', async () => {
    fakeDst = { family: 4, address: '127.0.0.1', port: echoPort };
    const r = await through('hello', { end: true });
    expect(r.err).toBeNull();
    expect(r.data).toBe('got:hello');
    expect(lines[0]).toMatchObject({
      action: 'allow',
      rule: '127.0.0.0/30',
      // A loopback destination is the name localhost too (an entry `localhost:PORT` decides it by address).
      subject: { domain: 'localhost', ip: '127.0.0.1' },
    });
  });

  it('plain HTTP: a half-close sent with the request reaches the server (one that answers only then)', async () => {
    fakeDst = { family: 4, address: '10.9.9.9', port: echoPort };
    const head = get('good.test');
    const r = await Promise.race([
      through(head, { end: true }),
      new Promise<{ data: string; err: string }>((res) => setTimeout(() => res({ data: '', err: 'hung' }), 3000)),
    ]);
    expect(r).toMatchObject({ err: null, data: 'got:' + head });
    expect(lines[0]).toMatchObject({ action: 'allow', subject: { domain: 'good.test', upstream: '127.0.0.1' } });
  });

  it('a client that sends nothing is judged by address after the peek time-out', async () => {
    fakeDst = { family: 4, address: '127.0.0.1', port: echoPort };
    const r = await new Promise<string>((resolve) => {
      const c = net.connect(proxyPort, '127.0.0.1');
      let data = '';
      c.on('data', (d) => (data += d.toString()));
      c.on('close', () => resolve(data));
      setTimeout(() => c.end('late'), 600);
    });
    expect(r).toBe('got:late');
  });

  it('stops peeking at the size bound and judges by address', async () => {
    fakeDst = { family: 4, address: '10.9.9.9', port: echoPort };
    // A handshake record announcing a 60 KiB ClientHello that never completes: 'more' forever.
    const head = Buffer.from([0x16, 0x03, 0x01, 0x48, 0x00, 0x01, 0x00, 0xf0, 0x00]);
    const t0 = Date.now();
    // 17,000 bytes stay inside the announced 18 KiB record: every prefix parses as 'more', so only the size
    // bound (16 KiB) can end the peek before the time-out.
    const r = await through(Buffer.concat([head, Buffer.alloc(17000 - head.length, 1)]));
    expect(r.err).toBe('ECONNRESET');
    expect(Date.now() - t0).toBeLessThan(250); // well before the 300 ms peek time-out
    expect(lines[0]).toMatchObject({ reason: 'not_allowed', subject: { domain: null, ip: '10.9.9.9' } });
  });

  it('uses an injected resolve() instead of DNS when given one', async () => {
    const port = await freePort();
    const asked: string[] = [];
    const p2 = createProxy<CompiledPolicy>({
      decide,
      log: { write: (rec) => (lines.push(rec), 'r') },
      resolvers: [],
      resolve: async (name) => (asked.push(name), ['127.0.0.1']),
      hosts: ['127.0.0.1'],
      splice,
      originalDst: () => ({ family: 4, address: '10.1.1.1', port: upPort }),
    });
    // The name resolves to loopback (where the test's upstream is): an entry must name that address itself.
    await p2.setSubject({
      uid: 7,
      port,
      policy: compilePolicy(netPolicy({ allow: ['made.up', `127.0.0.1:${upPort}`] })),
    });
    try {
      const r = await new Promise<string>((resolve) => {
        const c = net.connect(port, '127.0.0.1', () => c.write(get('made.up')));
        let data = '';
        c.on('data', (d) => (data += d.toString()));
        c.on('close', () => resolve(data));
      });
      expect(r).toContain('"host":"made.up"');
      expect(asked).toEqual(['made.up']);
    } finally {
      await p2.close();
    }
  });

  it("the subject's own DNS answers never unlock loopback; a name they did not answer is resolved by the proxy", async () => {
    const port = await freePort();
    const asked: string[] = [];
    const mine: typeof lines = [];
    let dst = { family: 4 as const, address: '127.0.0.1', port: upPort };
    const p2 = createProxy<CompiledPolicy>({
      decide,
      log: { write: (rec) => (mine.push(rec), 'r') },
      resolvers: [],
      // The proxy's own resolution says 127.0.0.1 for other.up; the forwarder told this subject 127.0.0.1 for told.up.
      resolve: async (name) => (asked.push(name), ['127.0.0.1']),
      seen: (uid, name) => (uid === 7 && name === 'told.up' ? ['127.0.0.1'] : []),
      hosts: ['127.0.0.1'],
      splice,
      originalDst: () => dst,
    });
    await p2.setSubject({ uid: 7, port, policy: compilePolicy(netPolicy({ allow: ['told.up', 'other.up'] })) });
    const fetch = (host: string) =>
      new Promise<string>((resolve) => {
        const c = net.connect(port, '127.0.0.1', () => c.write(get(host)));
        let data = '';
        c.on('data', (d) => (data += d.toString()));
        c.on('error', () => {});
        c.on('close', () => resolve(data));
      });
    try {
      // A DNS answer that points an allowed name at loopback (rebinding) does not make loopback allowed: the
      // destination is judged as localhost, by address, and refused before any name is read.
      expect(await fetch('told.up')).toBe('');
      expect(asked).toEqual([]);
      expect(mine[0]).toMatchObject({
        action: 'block',
        subject: { domain: 'localhost', ip: '127.0.0.1', port: upPort },
      });
      // Not told: the proxy's own resolution decides, and the agent's address is not used. It says loopback, where
      // a name leads only when an entry names the address itself (rebind).
      dst = { family: 4, address: '10.9.9.9', port: upPort };
      expect(await fetch('other.up')).toBe('');
      expect(asked).toEqual(['other.up']);
      expect(mine[1]).toMatchObject({
        action: 'block',
        reason: 'rebind',
        subject: { domain: 'other.up', upstream: '127.0.0.1' },
      });
      const named = netPolicy({ allow: ['told.up', 'other.up', `127.0.0.1:${upPort}`] });
      await p2.setSubject({ uid: 7, port, policy: compilePolicy(named) });
      expect(await fetch('other.up')).toContain('"host":"other.up"');
      expect(mine[2]?.subject).toMatchObject({ domain: 'other.up', upstream: '127.0.0.1' });
    } finally {
      await p2.close();
    }
  });

  it('blocks an HTTP head naming two hosts', async () => {
    fakeDst = { family: 4, address: '127.0.0.1', port: upPort };
    const r = await through('GET http://good.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n');
    expect(r.err).toBe('ECONNRESET');
    expect(lines[0]).toMatchObject({ reason: 'ambiguous_host' });
  });

  it('a subject with no policy refuses everything', async () => {
    await proxy.setSubject({ uid: 4242, port: proxyPort, policy: null });
    try {
      fakeDst = { family: 4, address: '127.0.0.1', port: echoPort };
      expect((await through('x')).err).toBe('ECONNRESET');
      expect(lines[0]).toMatchObject({ reason: 'no_policy', action: 'block' });
    } finally {
      await proxy.setSubject({
        uid: 4242,
        port: proxyPort,
        policy: compilePolicy(netPolicy({ allow: ['good.test', '127.0.0.0/30'], deny: ['127.0.0.2'] })),
      });
    }
  });

  it('a server that speaks first and is allowed by address gets its banner through at once (no peek wait)', async () => {
    fakeDst = { family: 4, address: '127.0.0.1', port: bannerPort };
    const t0 = Date.now();
    const got = await new Promise<{ banner: number; data: string }>((resolve) => {
      const c = net.connect(proxyPort, '127.0.0.1');
      let data = '';
      let at = -1;
      c.on('data', (d) => {
        if (at < 0) {
          at = Date.now() - t0;
          c.write('QUIT\r\n');
        }
        data += d.toString();
      });
      c.on('close', () => resolve({ banner: at, data }));
    });
    expect(got.data).toBe('220 banner\r\n221 bye\r\n');
    expect(got.banner).toBeGreaterThanOrEqual(0);
    expect(got.banner).toBeLessThan(150); // the peek time-out is 300 ms here
    expect(lines).toEqual([expect.objectContaining({ action: 'allow', rule: '127.0.0.0/30' })]);
  });

  it('plain HTTP: a second request for another host on the kept-alive connection is answered 403 and closed', async () => {
    fakeDst = { family: 4, address: '127.0.0.1', port: upPort };
    const ka = (h: string) => `GET / HTTP/1.1\r\nHost: ${h}\r\n\r\n`;
    const r = await new Promise<string>((resolve) => {
      const c = net.connect(proxyPort, '127.0.0.1', () => c.write(ka('good.test')));
      let data = '';
      c.on('data', (d) => {
        data += d.toString();
        if ((data.match(/HTTP\/1\.1 200/g) ?? []).length === 1 && data.includes('"host":"good.test"')) {
          if (!data.includes('sent2')) {
            data += 'sent2';
            c.write(ka('good.test') + ka('evil.test'));
          }
        }
      });
      c.on('close', () => resolve(data));
    });
    expect((r.match(/HTTP\/1\.1 200/g) ?? []).length).toBe(2);
    expect(r).toMatch(/HTTP\/1\.1 403 Forbidden[^]*$/);
    expect(r.indexOf('403')).toBeGreaterThan(r.lastIndexOf('HTTP/1.1 200'));
    expect(lines.map((l) => [l.action, l.reason])).toEqual([
      ['allow', 'allow_entry'],
      ['block', 'http_host_changed'],
    ]);
    expect(lines[1]).toMatchObject({ subject: { domain: 'evil.test', request: 3 } });
  });

  it('ECH: refused by default, judged by the outer name under network.ech: allow', async () => {
    const hello = withExtension(await captureHello('good.test'), 0xfe0d, Buffer.alloc(32, 1));
    fakeDst = { family: 4, address: '127.0.0.1', port: echoPort };
    expect((await through(hello, { end: true })).err).toBe('ECONNRESET');
    expect(lines[0]).toMatchObject({
      action: 'block',
      reason: 'ech_refused',
      subject: { domain: 'good.test', ech: true },
    });
    const policy = compilePolicy(netPolicy({ allow: ['good.test', '127.0.0.0/30'], deny: ['127.0.0.2'] }));
    await proxy.setSubject({ uid: 4242, port: proxyPort, policy, ech: 'allow' });
    try {
      lines.length = 0;
      const r = await through(hello, { end: true });
      expect(r.err).toBeNull();
      expect(r.data).toBe('got:' + hello.toString());
      expect(lines[0]).toMatchObject({ action: 'allow', subject: { domain: 'good.test', ech: true } });
      // The outer name is still judged: a denied outer name is refused.
      fakeDst = { family: 4, address: '10.9.9.9', port: echoPort };
      const evil = withExtension(await captureHello('evil.test'), 0xfe0d, Buffer.alloc(32, 1));
      expect((await through(evil, { end: true })).err).toBe('ECONNRESET');
      expect(lines[1]).toMatchObject({ action: 'block', reason: 'not_allowed', subject: { domain: 'evil.test' } });
    } finally {
      await proxy.setSubject({ uid: 4242, port: proxyPort, policy });
    }
  });

  it('a subject with no policy lets connections through under fail_mode open', async () => {
    await proxy.setSubject({ uid: 4242, port: proxyPort, policy: null });
    proxy.setFailMode('open');
    try {
      fakeDst = { family: 4, address: '127.0.0.1', port: echoPort };
      const r = await through('hi', { end: true });
      expect(r.data).toBe('got:hi');
      expect(lines[0]).toMatchObject({ action: 'allow', reason: 'no_policy' });
    } finally {
      proxy.setFailMode('closed');
      await proxy.setSubject({
        uid: 4242,
        port: proxyPort,
        policy: compilePolicy(netPolicy({ allow: ['good.test', '127.0.0.0/30'], deny: ['127.0.0.2'] })),
      });
    }
  });

  it.each([
    ['10.0.0.0/8', true],
    ['1.2.3.4', true],
    ['1.2.3.4:443', true],
    ['[2001:db8::1]:443', true],
    ['2001:db8::/32', true],
    ['github.com', false],
    ['github.com:443', false],
    [null, false],
  ])('isAddressRule(%s) = %s', (rule, want) => {
    expect(isAddressRule(rule)).toBe(want);
  });
});
