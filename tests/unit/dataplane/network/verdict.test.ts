import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProxy, type Proxy } from '../../../../src/dataplane/network/proxy/proxy.js';
import { peekDestination } from '../../../../src/dataplane/network/proxy/peek.js';
import {
  arrivalVerdict,
  askedVerdict,
  destinationVerdict,
  nameToResolve,
  peekVerdict,
  type Line,
  type SubjectPolicy,
} from '../../../../src/dataplane/network/proxy/verdict.js';
import { answerVerdict, queryVerdict, tcpArrivalVerdict } from '../../../../src/dataplane/network/dns/verdict.js';
import { RCODE, encodeQuery, parseQuery, type Query } from '../../../../src/dataplane/network/dns/wire.js';
import type { DecisionRecord } from '../../../../src/log/decisions.js';
import type { OriginalDst } from '../../../../src/native.js';
import { captureHello, withExtension } from '../../../../src/lab/client-hello.js';
import {
  compilePolicy,
  decide,
  decideDnsAnswer,
  decideDnsName,
  type CompiledPolicy,
} from '../../../../src/engine/index.js';
import { loadNative } from '../../../../src/native.js';
import { netPolicy } from '../../../lab/policy.js';

// One verdict, two ways in: every arrival below is judged by the pure verdict functions, then sent through the
// proxy's native way in (the addon's acceptor) and its stream way in (net.Server); all three must write the same
// lines. The cases are the ones each way in used to judge with its own copy of the steps.

const NAMES: Record<string, string[]> = {
  'good.test': ['127.0.0.1'],
  'inner.test': ['10.1.2.3'],
  'none.test': [],
};
const resolve = (name: string) => Promise.resolve(NAMES[name] ?? []);

const ENFORCED = compilePolicy(
  netPolicy({
    allow: ['good.test', 'inner.test', 'none.test', 'web.test', '127.0.0.0/30'],
    deny: ['evil.test', '127.0.0.2'],
    ask: ['asked.test'],
  }),
);
const SHADOW = compilePolicy({ ...netPolicy({ allow: ['good.test'] }), enforce: 'shadow' });

interface Case {
  name: string;
  policy: CompiledPolicy | null;
  /** The original destination, 'listener' (a direct connection to the proxy) or 'unreadable'. */
  dst: (() => OriginalDst) | 'listener' | 'unreadable';
  /** What the client sends: a ClientHello for `tls`, a head for `http`, raw bytes otherwise. */
  send: { tls: string; ech?: boolean } | { http: string } | { raw: string };
  want: [DecisionRecord['action'], string][];
}

let echoPort = 0;
const to = (address: string, port = () => echoPort): (() => OriginalDst) => {
  return () => ({ family: net.isIPv6(address) ? 6 : 4, address, port: port() });
};

const CASES: Case[] = [
  {
    name: 'TLS, allowed name: to where it resolves',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { tls: 'good.test' },
    want: [['allow', 'allow_entry']],
  },
  {
    name: 'TLS, denied name',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { tls: 'evil.test' },
    want: [['block', 'deny_entry']],
  },
  {
    name: 'TLS, unlisted name',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { tls: 'other.test' },
    want: [['block', 'not_allowed']],
  },
  {
    name: 'TLS with ECH, refused',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { tls: 'good.test', ech: true },
    want: [['block', 'ech_refused']],
  },
  {
    name: 'TLS, a name resolving into an internal range (rebind)',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { tls: 'inner.test' },
    want: [['block', 'rebind']],
  },
  {
    name: 'TLS, a name resolving to nothing',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { tls: 'none.test' },
    want: [['block', 'resolve_failed']],
  },
  {
    name: 'TLS, an ask entry with no approvals queue',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { tls: 'asked.test' },
    want: [['block', 'approval_unavailable']],
  },
  {
    name: 'TLS, address allowed, name denied (connected early, then dropped)',
    policy: ENFORCED,
    dst: to('127.0.0.1'),
    send: { tls: 'evil.test' },
    want: [['block', 'deny_entry']],
  },
  {
    name: 'TLS, address allowed, name unlisted (the address decides)',
    policy: ENFORCED,
    dst: to('127.0.0.1'),
    send: { tls: 'other.test' },
    want: [['allow', 'allow_entry']],
  },
  {
    name: 'address denied: refused at arrival',
    policy: ENFORCED,
    dst: to('127.0.0.2'),
    send: { tls: 'good.test' },
    want: [['block', 'deny_entry']],
  },
  {
    name: 'HTTP, allowed Host (the request gate)',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { http: 'good.test' },
    want: [['allow', 'allow_entry']],
  },
  {
    name: 'HTTP naming two hosts',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { http: 'good.test\r\nHost: evil.test' },
    want: [['block', 'ambiguous_host']],
  },
  {
    name: 'a protocol with no name, unlisted address',
    policy: ENFORCED,
    dst: to('10.9.9.9'),
    send: { raw: 'SSH-2.0-x\r\n' },
    want: [['block', 'not_allowed']],
  },
  {
    name: 'shadow mode: an unlisted name goes through, logged would_block',
    policy: SHADOW,
    dst: to('127.0.0.1'),
    send: { tls: 'other.test' },
    want: [['would_block', 'not_allowed']],
  },
  // good.test resolves to loopback, which no entry of this policy names: a rebind, logged too.
  {
    name: 'shadow mode: ECH logged, then judged by the outer name',
    policy: SHADOW,
    dst: to('10.9.9.9'),
    send: { tls: 'good.test', ech: true },
    want: [
      ['would_block', 'ech_refused'],
      ['would_block', 'rebind'],
      ['allow', 'allow_entry'],
    ],
  },
  { name: 'no policy', policy: null, dst: to('10.9.9.9'), send: { tls: 'good.test' }, want: [['block', 'no_policy']] },
  {
    name: 'a direct connection to the listener',
    policy: ENFORCED,
    dst: 'listener',
    send: { tls: 'good.test' },
    want: [['block', 'not_redirected']],
  },
  {
    name: 'loopback in the reserved proxy range',
    policy: ENFORCED,
    dst: to('127.0.0.1', () => 18123),
    send: { tls: 'good.test' },
    want: [['block', 'not_redirected']],
  },
  {
    name: 'no original destination',
    policy: ENFORCED,
    dst: 'unreadable',
    send: { tls: 'good.test' },
    want: [['block', 'no_original_dst']],
  },
];

const hellos = new Map<string, Buffer>();
async function bytesOf(send: Case['send']): Promise<Buffer> {
  if ('raw' in send) return Buffer.from(send.raw);
  if ('http' in send) return Buffer.from(`GET / HTTP/1.1\r\nHost: ${send.http}\r\nConnection: close\r\n\r\n`);
  const key = `${send.tls}:${send.ech === true}`;
  if (!hellos.has(key)) {
    const h = await captureHello(send.tls);
    hellos.set(key, send.ech ? withExtension(h, 0xfe0d, Buffer.alloc(32, 1)) : h);
  }
  return hellos.get(key)!;
}

/** The lines the verdict functions alone give for a case (what each way in must write). */
async function verdictLines(c: Case, bytes: Buffer, proxyPort: number): Promise<Line[]> {
  const s: SubjectPolicy<CompiledPolicy> = { decide, policy: c.policy, failMode: 'closed', ech: 'refuse' };
  const listener = { family: 4 as const, address: '127.0.0.1', port: proxyPort };
  const dst = c.dst === 'unreadable' ? { error: 'ENOENT' } : c.dst === 'listener' ? listener : c.dst();
  const a = arrivalVerdict(s, {
    dst,
    local: { address: '127.0.0.1', port: proxyPort },
    peer: { address: '127.0.0.1', port: 1 },
    isListener: (d) => d.port === proxyPort && d.address === '127.0.0.1',
    own: new Set(),
  });
  if ('refusal' in a) return [{ action: 'block', ...a.refusal }];
  let action = peekVerdict(s, a.arrival, peekDestination(bytes), a.byAddress);
  const lines = [...action.notes];
  if (action.do === 'ask')
    action = askedVerdict(action.allow, { action: 'block', reason: 'approval_unavailable', request: null });
  if (action.do === 'refuse') return [...lines, { action: 'block', ...action.line }];
  if (action.do === 'early') return [...lines, action.line];
  if (action.do !== 'allow') throw new Error('unreachable');
  const name = nameToResolve(action.allow);
  const addrs = name === null ? [] : await resolve(name);
  const resolved = name === null ? null : { v4: addrs, v6: [], expires: 0 };
  const d = destinationVerdict(s, action.allow, resolved, new Set());
  lines.push(...d.notes);
  return [...lines, d.do === 'refuse' ? { action: 'block', ...d.line } : d.line];
}

function strip(rec: DecisionRecord): Line {
  const { uid: _u, surface: _s, ...rest } = rec;
  // Where the peer came from differs per connection; the verdict was given peer 127.0.0.1:1.
  const subject = rest.subject as Record<string, unknown>;
  if (subject && typeof subject.peer === 'string') return { ...rest, subject: { ...subject, peer: '127.0.0.1:1' } };
  return rest;
}

const hasAcceptor = (() => {
  try {
    return typeof loadNative().Acceptor === 'function';
  } catch {
    return false;
  }
})();

describe('one verdict for both ways in (proxy)', () => {
  let echo: net.Server;
  const ways = [
    { way: 'native', nativeAccept: true },
    { way: 'stream', nativeAccept: false },
  ].filter((w) => w.nativeAccept === false || hasAcceptor);
  const proxies: { way: string; proxy: Proxy<CompiledPolicy>; port: number; lines: DecisionRecord[] }[] = [];
  let current: Case | null = null;

  beforeAll(async () => {
    echo = net.createServer({ allowHalfOpen: true }, (s) => {
      s.on('error', () => {});
      s.on('data', () => {});
      s.on('end', () => s.end('ok'));
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    echoPort = (echo.address() as net.AddressInfo).port;
    for (const w of ways) {
      const lines: DecisionRecord[] = [];
      let port = 0;
      const proxy = createProxy<CompiledPolicy>({
        decide,
        log: { write: (rec) => (lines.push(rec), '') },
        resolvers: [],
        resolve,
        hosts: ['127.0.0.1'],
        peekTimeoutMs: 300,
        nativeAccept: w.nativeAccept,
        originalDst: () => {
          const d = current!.dst;
          if (d === 'unreadable') throw Object.assign(new Error('no original destination'), { code: 'ENOENT' });
          if (d === 'listener') return { family: 4, address: '127.0.0.1', port };
          return d();
        },
      });
      // Listening on a port of its own: the first free one the kernel gives, outside the reserved range.
      port = await freePort();
      await proxy.setSubject({ uid: 4343, port, policy: ENFORCED });
      proxies.push({ way: w.way, proxy, port, lines });
    }
  });
  afterAll(async () => {
    for (const p of proxies) await p.proxy.close();
    echo?.close();
  });

  it.each(CASES.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    current = c;
    const bytes = await bytesOf(c.send);
    const seen: Record<string, Line[]> = {};
    for (const p of proxies) {
      await p.proxy.setSubject({ uid: 4343, port: p.port, policy: c.policy });
      p.lines.length = 0;
      await send(p.port, bytes);
      seen[p.way] = p.lines.map(strip);
    }
    for (const p of proxies) {
      const want = await verdictLines(c, bytes, p.port);
      expect(want.map((l) => [l.action, l.reason])).toEqual(c.want);
      expect({ way: p.way, lines: seen[p.way] }).toEqual({ way: p.way, lines: want });
    }
  });
});

function freePort(): Promise<number> {
  return new Promise((r) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => r(p));
    });
  });
}

/** Sends `bytes`, half-closes, and waits for the connection to end (reset or closed). */
function send(port: number, bytes: Buffer): Promise<void> {
  return new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1', () => {
      c.write(bytes);
      c.end();
    });
    c.on('data', () => {});
    c.on('error', () => resolve());
    c.on('close', () => resolve());
  });
}

describe('one verdict for a DNS query', () => {
  const s = {
    decide: decideDnsName,
    decideAnswer: decideDnsAnswer,
    policy: ENFORCED,
    failMode: 'closed' as const,
    refuseRcode: RCODE.REFUSED,
  };
  const query = (name: string): Query => {
    const q: Query = { id: 7, rd: true, cd: false, question: { name, qtype: 1, qclass: 1 }, edns: null };
    const p = parseQuery(encodeQuery(7, q));
    if (!p.ok) throw new Error(p.why);
    return p.query;
  };

  it.each([
    ['good.test', 'forward', null],
    ['evil.test', 'refuse', 'deny_entry'],
    ['other.test', 'refuse', 'not_allowed'],
  ])('%s: %s %s', (name, what, reason) => {
    const q = query(name);
    const a = queryVerdict(s, { ok: true, query: q }, 30, 'udp');
    expect(a.do).toBe(what);
    if (a.do === 'refuse') {
      expect(a.line).toMatchObject({ action: 'block', reason, subject: { dns: name, qtype: 'A' } });
      expect(a.reply).toEqual({ id: 7, rcode: RCODE.REFUSED, query: q });
    }
  });

  it('a message that is not a strict query is refused, answered only when its id could be read', () => {
    const a = queryVerdict(s, parseQuery(Buffer.from([1, 2, 3])), 3, 'tcp');
    expect(a).toMatchObject({ do: 'refuse', reply: null, line: { reason: 'dns_malformed', subject: { bytes: 3 } } });
  });

  it('no policy: refused closed, forwarded open', () => {
    const q = { ok: true as const, query: query('good.test') };
    expect(queryVerdict({ ...s, policy: null }, q, 30, 'udp')).toMatchObject({ line: { reason: 'no_policy' } });
    expect(queryVerdict({ ...s, policy: null, failMode: 'open' }, q, 30, 'udp')).toMatchObject({ do: 'forward' });
  });

  it('an answer leading an allowed name into an internal address is refused whole (rebind)', () => {
    const q = query('good.test');
    const v = queryVerdict(s, { ok: true, query: q }, 30, 'udp');
    if (v.do !== 'forward') throw new Error('not forwarded');
    const answer = (address: string) => ({ id: 7, rcode: 0, truncated: false, addresses: [{ address, ttl: 60 }] });
    expect(answerVerdict(s, q, v.verdict, 'udp', answer('198.18.0.1'), new Set())).toEqual({
      refuse: false,
      lines: [],
    });
    expect(answerVerdict(s, q, v.verdict, 'udp', answer('10.0.0.1'), new Set())).toMatchObject({
      refuse: true,
      lines: [{ action: 'block', reason: 'rebind', subject: { dns: 'good.test', address: '10.0.0.1' } }],
    });
  });

  it('TCP: only a connection redirected from port 53 is served', () => {
    const peer = { address: '::ffff:127.0.0.1', port: 5 };
    expect(tcpArrivalVerdict({ family: 4, address: '1.1.1.1', port: 53 }, peer)).toBeNull();
    expect(tcpArrivalVerdict({ family: 4, address: '1.1.1.1', port: 5353 }, peer)).toMatchObject({
      reason: 'not_redirected',
      subject: { peer: '127.0.0.1:5' },
    });
    expect(tcpArrivalVerdict(null, peer)).toMatchObject({ reason: 'no_original_dst' });
  });
});
