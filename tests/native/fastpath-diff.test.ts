// The proxy's native verdict path (native/proxy/fastpath.h, sni.h) against the JavaScript path it stands in for
// (peek.ts, verdict.ts, resolve.ts, the decision log's formatDecisionTail): for every generated case the native
// path decides, it must decide exactly as JavaScript does (the same refusal or the same upstream, and the same
// line, byte for byte); it may hand any case to JavaScript ("js"), never decide one JavaScript would decide
// otherwise. Also its ClientHello parser against peek.ts on well-formed and broken hellos. Fixed seed;
// LEASH_FASTPATH_CASES runs more.
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { compilePolicy, decide } from '../../src/engine/index.js';
import type { FailMode, NetworkSurfacePolicy, PolicyInput } from '../../src/engine/types.js';
import { compileNetMatch } from '../../src/dataplane/network/netmatch.js';
import { peekDestination } from '../../src/dataplane/network/proxy/peek.js';
import { ownAddresses, resolveName, type Resolved } from '../../src/dataplane/network/proxy/resolve.js';
import {
  arrivalVerdict,
  destinationVerdict,
  peekVerdict,
  type SubjectPolicy,
} from '../../src/dataplane/network/proxy/verdict.js';
import { formatDecisionTail, type DecisionRecord } from '../../src/log/decisions.js';
import { loadNative, nativeAvailable } from '../../src/native.js';
import { mulberry32 } from '../lab/prng.js';

interface Hooks {
  sniParse(b: Buffer): string;
  fastVerdictBatch(
    h: unknown,
    uid: number,
    hellos: Buffer[],
    ips: string[],
    ports: number[],
    answers: [string, string[], string[]][],
    told: boolean,
  ): string[];
}

const UID = 4242;

// ---- ClientHellos ----

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n & 0xffff);
  return b;
}
function ext(type: number, body: Buffer): Buffer {
  return Buffer.concat([u16(type), u16(body.length), body]);
}
function sniExt(names: Buffer[], types: number[] = names.map(() => 0)): Buffer {
  const list = Buffer.concat(names.map((n, i) => Buffer.concat([Buffer.from([types[i]!]), u16(n.length), n])));
  return ext(0, Buffer.concat([u16(list.length), list]));
}
/** A ClientHello with these extensions, in `records` TLS records (split at even points). */
function hello(exts: Buffer[], records = 1, sessionId = 0): Buffer {
  const body = Buffer.concat([
    Buffer.from([3, 3]),
    Buffer.alloc(32, 7),
    Buffer.from([sessionId]),
    Buffer.alloc(sessionId, 1),
    u16(4),
    Buffer.from([0x13, 0x01, 0x13, 0x02]),
    Buffer.from([1, 0]),
    ...(exts.length || records < 0 ? [u16(Buffer.concat(exts).length), ...exts] : []),
  ]);
  const hs = Buffer.concat([Buffer.from([1, (body.length >> 16) & 0xff]), u16(body.length), body]);
  const n = Math.max(1, records);
  const out: Buffer[] = [];
  const step = Math.ceil(hs.length / n);
  for (let off = 0; off < hs.length; off += step) {
    const part = hs.subarray(off, off + step);
    out.push(Buffer.from([0x16, 3, 1]), u16(part.length), part);
  }
  return Buffer.concat(out);
}

const NAMES = [
  'github.com',
  'api.github.com',
  'GitHub.COM',
  'github.com.',
  'evil.com',
  'www.evil.com',
  'intra.allowed.test',
  'x.allowed.test',
  'my_host.internal',
  'localhost',
  'a.localhost',
  'xn--bcher-kva.example',
  'good.lab',
  'priv.good.lab',
  'loop.good.lab',
  'other.lab',
  '10.1.2.3',
  '1.2.3',
  'a..b',
  '-a.com',
  'a-.com',
  '_x.com',
  'bad name',
  '',
  'a.b.c.d.e.f.github.com',
  `${'a'.repeat(63)}.com`,
  `${'a'.repeat(64)}.com`,
];

const RESOLVED = ['github.com', 'api.github.com', 'good.lab', 'priv.good.lab', 'GitHub.COM', 'intra.allowed.test'];

const ENTRIES = [
  'github.com',
  '*.github.com',
  'github.com:443',
  'api.github.com:8443',
  'evil.com',
  '*.evil.com',
  'good.lab',
  'allowed.test',
  'intra.allowed.test',
  'my_host.internal',
  'localhost',
  'localhost:443',
  'xn--bcher-kva.example',
  '10.1.2.3',
  '10.1.2.3:443',
  '10.0.0.0/8',
  '10.0.0.0/8:443',
  '140.82.112.0/24',
  '0.0.0.0/0',
  '192.168.0.0/16',
  '169.254.169.254',
  '2001:db8::/32',
  '[2001:db8::1]:443',
  '[fd00::/8]:443',
  '::/0',
  'fd00::1',
  '198.18.1.10',
  '8.8.8.8:443',
];

const own = [...ownAddresses()].filter((a) => net.isIP(a) && !a.startsWith('fe80'));
const IPS = [
  '140.82.112.3',
  '140.82.112.4',
  '10.1.2.3',
  '10.9.9.9',
  '169.254.169.254',
  '192.168.1.5',
  '198.18.1.10',
  '198.18.1.20',
  '8.8.8.8',
  '1.1.1.1',
  '2001:db8::1',
  '2001:db8::5',
  'fd00::1',
  '2606:4700::1111',
  '127.0.0.1',
  '127.0.0.2',
  '::1',
  '0.0.0.0',
  '::ffff:10.1.2.3',
  ...own,
];
const PORTS = [443, 443, 443, 80, 8443, 22, 65535];

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}
function some<T>(r: () => number, xs: readonly T[], max: number): T[] {
  const n = Math.floor(r() * (max + 1));
  return Array.from({ length: n }, () => pick(r, xs));
}

function genPolicy(r: () => number): PolicyInput {
  const net: NetworkSurfacePolicy = {
    mode: r() < 0.7 ? 'whitelist' : 'blacklist',
    // Mostly with a name entry for the names the generator sends and resolves: the relays to judge.
    allow: [
      ...some(r, ENTRIES, 3),
      ...(r() < 0.8 ? some(r, ['github.com', '*.github.com', 'good.lab', 'github.com:443'], 2) : []),
    ],
    deny: some(r, ENTRIES, 2),
    ...(r() < 0.3 ? { ask: some(r, ENTRIES, 2) } : {}),
    ...(r() < 0.3 ? { internal: some(r, ['10.0.0.0/8', '198.18.0.0/15', 'fd00::/8', '140.82.112.0/24'], 2) } : {}),
    ...(r() < 0.3 ? { rebind_ok: some(r, ['intra.allowed.test', 'priv.good.lab', 'github.com'], 2) } : {}),
  };
  const fail: FailMode = r() < 0.2 ? 'open' : 'closed';
  const empty = { mode: 'whitelist' as const, allow: [], deny: [] };
  return {
    fail_mode: fail,
    ...(r() < 0.05 ? { enforce: 'shadow' as const } : {}),
    network: net,
    filesystem: empty,
    commands: empty,
    tools: { ...empty, inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' } },
  };
}

function genHello(r: () => number): Buffer {
  const x = r();
  // Half the time a name the answers know (the common case: a client names what it resolved).
  const name = () => Buffer.from(pick(r, r() < 0.5 ? RESOLVED : NAMES), 'latin1');
  const extra = r() < 0.3 ? [ext(0x000a, Buffer.from([0, 2, 0, 0x1d]))] : [];
  if (x < 0.6) return hello([...extra, sniExt([name()])], r() < 0.2 ? 2 + Math.floor(r() * 3) : 1, r() < 0.3 ? 32 : 0);
  if (x < 0.68) return hello(extra); // no server_name
  if (x < 0.74) return hello([sniExt([name()]), ext(0xfe0d, Buffer.alloc(8, 1))]); // ECH
  if (x < 0.78) return hello([sniExt([name()]), sniExt([name()])]); // two server_name extensions
  if (x < 0.82) return hello([sniExt([name(), name()])]); // two names in one
  if (x < 0.85) return hello([sniExt([name()], [1])]); // a name of another type
  if (x < 0.88) return hello([sniExt([Buffer.from([0x67, 0xc3, 0xaf, 0x74])])]); // non-ASCII
  if (x < 0.92) {
    const h = hello([sniExt([name()])]);
    return h.subarray(0, Math.floor(r() * h.length)); // cut short
  }
  if (x < 0.96) {
    const h = Buffer.from(hello([sniExt([name()])]));
    h[Math.floor(r() * h.length)] = Math.floor(r() * 256); // one byte changed
    return h;
  }
  return Buffer.from(`GET / HTTP/1.1\r\nHost: ${pick(r, NAMES)}\r\n\r\n`);
}

function genAnswers(r: () => number): [string, string[], string[]][] {
  const out: [string, string[], string[]][] = [];
  for (const n of [...RESOLVED.slice(0, 4), 'intra.allowed.test', 'evil.com']) {
    if (r() < 0.2) continue;
    const addrs = some(
      r,
      IPS.filter((a) => !a.startsWith('::ffff:')),
      3,
    );
    out.push([n, addrs.filter((a) => net.isIPv4(a)), addrs.filter((a) => net.isIPv6(a))]);
  }
  return out;
}

const tally = { cases: 0, decided: 0, refused: 0, relayed: 0, upstreamElsewhere: 0, rebind: 0 };

async function compare(
  h: Hooks,
  p: PolicyInput,
  hellos: Buffer[],
  ips: string[],
  ports: number[],
  answers: [string, string[], string[]][],
  told: boolean,
) {
  const compiled = compilePolicy(p);
  const s: SubjectPolicy<typeof compiled> = { decide, policy: compiled, failMode: 'closed', ech: 'refuse' };
  const nat = h.fastVerdictBatch(compileNetMatch(p), UID, hellos, ips, ports, answers, told);
  const table = new Map(answers.map(([n, v4, v6]) => [n, { v4, v6, expires: 0 } as Resolved]));
  const resolver = async (name: string): Promise<Resolved> => table.get(name) ?? { v4: [], v6: [], expires: 0 };
  const owned = ownAddresses();
  const tail = (rec: Omit<DecisionRecord, 'uid' | 'surface'>) =>
    formatDecisionTail({ uid: UID, surface: 'network', ...rec } as DecisionRecord);
  for (let i = 0; i < nat.length; i++) {
    tally.cases++;
    const n = nat[i]!;
    const ip = ips[i]!;
    const c = {
      policy: p.network,
      enforce: p.enforce,
      fail: p.fail_mode,
      hello: hellos[i]!.toString('hex'),
      ip,
      port: ports[i],
      answers,
      told,
    };
    if (n === 'arrival-js' || n === 'js') continue;
    const a = arrivalVerdict(s, {
      dst: { family: net.isIPv4(ip) ? 4 : 6, address: ip, port: ports[i]! },
      local: { address: '127.0.0.1', port: 1 },
      peer: { address: '127.0.0.1', port: 2 },
      isListener: () => false,
      own: owned,
    });
    let expected: string;
    const peeked = peekDestination(hellos[i]!);
    if ('refusal' in a || a.byAddress) expected = 'arrival-js';
    else if (peeked.kind === 'more') expected = 'more';
    else {
      const act = peekVerdict(s, a.arrival, peeked, false);
      if (act.notes.length) expected = 'js (notes)';
      else if (act.do === 'refuse') expected = `refuse\t${tail({ action: 'block', ...act.line })}`;
      else if (act.do !== 'allow' || act.allow.httpHost !== undefined) expected = `js (${act.do})`;
      else {
        const name = act.allow.verdict.rule !== null && act.allow.domain ? act.allow.domain : null;
        const resolved = name === null ? null : await resolveName(ip, name, [], resolver);
        const to = destinationVerdict(s, act.allow, resolved, owned);
        if (to.notes.length) expected = 'js (notes)';
        else if (to.do === 'refuse') expected = `refuse\t${tail({ action: 'block', ...to.line })}`;
        else expected = `relay\t${to.target}\t${tail(to.line)}`;
      }
    }
    if (n === 'more') {
      if (expected !== 'more') expect({ ...c, native: n }).toEqual({ ...c, native: expected });
      continue;
    }
    tally.decided++;
    if (n.startsWith('refuse')) tally.refused++;
    else tally.relayed++;
    if (n.includes('"upstream"')) tally.upstreamElsewhere++;
    if (n.includes('"reason":"rebind"')) tally.rebind++;
    if (n !== expected) expect({ ...c, native: n }).toEqual({ ...c, native: expected });
  }
}

describe.skipIf(!nativeAvailable())('native verdict path against the JavaScript path', () => {
  it('the ClientHello parser reads what peek.ts reads (or says "other" and leaves it to JavaScript)', () => {
    const h = loadNative() as unknown as Hooks;
    const r = mulberry32(43);
    let tls = 0;
    for (let i = 0; i < 100_000; i++) {
      const b = genHello(r);
      const n = h.sniParse(b);
      const j = peekDestination(b);
      if (n === 'more') expect({ hex: b.toString('hex'), js: j.kind }).toEqual({ hex: b.toString('hex'), js: 'more' });
      else if (n === 'other')
        expect({ hex: b.toString('hex'), js: j.kind === 'tls' }).toEqual({ hex: b.toString('hex'), js: false });
      else {
        tls++;
        const want = j.kind === 'tls' ? `tls|${j.sni ?? '\u0001'}|${j.ech ? 1 : 0}` : j.kind;
        if (n !== want) expect({ hex: b.toString('hex'), native: n }).toEqual({ hex: b.toString('hex'), native: want });
      }
    }
    expect(tls).toBeGreaterThan(50_000);
  });

  it('decides only as JavaScript decides: the same refusal or upstream, the same line', async () => {
    const h = loadNative() as unknown as Hooks;
    const r = mulberry32(4343);
    const total = Number(process.env.LEASH_FASTPATH_CASES ?? 1_000_000);
    const per = 100;
    for (let done = 0; done < total; done += per) {
      const p = genPolicy(r);
      const hellos: Buffer[] = [];
      const ips: string[] = [];
      const ports: number[] = [];
      const answers = genAnswers(r);
      // Half the connections go to an address some name resolved to (a client that asked DNS first).
      const answered = answers.flatMap(([, v4, v6]) => [...v4, ...v6]);
      for (let k = 0; k < per; k++) {
        hellos.push(genHello(r));
        ips.push(answered.length && r() < 0.5 ? pick(r, answered) : pick(r, IPS));
        ports.push(pick(r, PORTS));
      }
      await compare(h, p, hellos, ips, ports, answers, r() < 0.5);
    }
    console.log(`fastpath-diff: ${JSON.stringify(tally)}`);
    expect(tally.cases).toBe(total);
    // Not a dull generator: the native path decided a good share, both ways, including names sent elsewhere.
    expect(tally.decided).toBeGreaterThan(total / 10);
    expect(tally.refused).toBeGreaterThan(total / 50);
    expect(tally.relayed).toBeGreaterThan(total / 200);
    expect(tally.upstreamElsewhere).toBeGreaterThan(100);
    expect(tally.rebind).toBeGreaterThan(100);
  }, 600_000);
});
