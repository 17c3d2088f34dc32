import dgram from 'node:dgram';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { compilePolicy, decideDnsName, ptrAddress, type CompiledPolicy } from '../../../../src/engine/index.js';
import { createDnsForwarder, type DnsForwarder } from '../../../../src/dataplane/network/dns/forwarder.js';
import { RCODE, encodeQuestion, parseQuery, readAnswer } from '../../../../src/dataplane/network/dns/wire.js';
import type { DecisionRecord } from '../../../../src/log/decisions.js';
import { answerDns } from '../../../../src/cli/demo/upstream.js';
import { runFuzz } from '../../../lab/dns-fuzz.js';

function query(name: string, qtype = 1, opts: { id?: number; flags?: number; edns?: boolean; extra?: Buffer } = {}) {
  const hdr = Buffer.alloc(12);
  hdr.writeUInt16BE(opts.id ?? 0x1234, 0);
  hdr.writeUInt16BE(opts.flags ?? 0x0100, 2);
  hdr.writeUInt16BE(1, 4);
  hdr.writeUInt16BE(opts.edns ? 1 : 0, 10);
  const parts = [hdr, encodeQuestion({ name, qtype, qclass: 1 })];
  if (opts.edns) {
    const opt = Buffer.alloc(11);
    opt.writeUInt16BE(41, 1);
    opt.writeUInt16BE(1232, 3);
    parts.push(opt);
  }
  if (opts.extra) parts.push(opts.extra);
  return Buffer.concat(parts);
}
const policy = (network: Record<string, unknown>): CompiledPolicy => compilePolicy({ network } as never);

describe('strict DNS query parsing', () => {
  it('accepts one plain question, with or without EDNS', () => {
    const r = parseQuery(query('Good.Lab', 28, { edns: true }));
    expect(r).toMatchObject({ ok: true, query: { id: 0x1234, rd: true, question: { name: 'Good.Lab', qtype: 28 } } });
  });

  it.each([
    ['a response', query('good.lab', 1, { flags: 0x8100 }), null],
    ['trailing bytes', query('good.lab', 1, { extra: Buffer.from([0]) }), RCODE.FORMERR],
    ['a non-LDH label byte', query('go!od.lab'), RCODE.FORMERR],
    ['an inverse query opcode', query('good.lab', 1, { flags: 0x0900 }), RCODE.NOTIMP],
    ['a zone transfer', query('good.lab', 252), RCODE.NOTIMP],
    ['OPT as the question type', query('good.lab', 41), RCODE.NOTIMP],
    ['a truncated query', query('good.lab', 1, { flags: 0x0300 }), RCODE.FORMERR],
    ['a header only', Buffer.alloc(12), RCODE.FORMERR],
    ['less than a header', Buffer.from('GET / HTTP'), null],
  ])('refuses %s', (_what, msg, rcode) => {
    const r = parseQuery(msg);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(rcode === null ? r.id : r.rcode).toBe(rcode === null ? null : rcode);
  });

  it('refuses two questions, a compressed name, class CH and records in a query', () => {
    const two = query('a.lab');
    two.writeUInt16BE(2, 4);
    expect(parseQuery(two)).toMatchObject({ ok: false, rcode: RCODE.FORMERR });
    const ptr = Buffer.concat([query('a.lab').subarray(0, 12), Buffer.from([0xc0, 0x0c, 0, 1, 0, 1])]);
    expect(parseQuery(ptr)).toMatchObject({ ok: false, rcode: RCODE.FORMERR });
    const ch = query('version.bind', 16);
    ch.writeUInt16BE(3, ch.length - 2);
    expect(parseQuery(ch)).toMatchObject({ ok: false, rcode: RCODE.NOTIMP });
    const an = query('a.lab');
    an.writeUInt16BE(1, 6);
    expect(parseQuery(an)).toMatchObject({ ok: false, rcode: RCODE.FORMERR });
  });

  it('fuzz: 50,000 generated and mutated messages, no throw, nothing accepted that does not re-encode', () => {
    const s = runFuzz(15, 50_000);
    expect(s.violations).toEqual([]);
    expect(s.accepted).toBeGreaterThan(5_000);
    expect(s.refused).toBeGreaterThan(20_000);
  });
});

describe('which names a subject may resolve', () => {
  const white = policy({
    mode: 'whitelist',
    allow: ['good.lab', '*.wild.lab', 'pinned.lab:8443', '198.19.2.0/24', '2001:db8:2::10'],
    deny: ['evil.good.lab', 'port.good.lab:443'],
  });
  const black = policy({ mode: 'blacklist', allow: [], deny: ['evil.lab', '198.18.1.30', 'port.lab:443'] });

  it('whitelist: an allow entry or its parent on some port; a deny entry on every port refuses', () => {
    const d = (n: string) => decideDnsName(n, white);
    expect(d('good.lab')).toMatchObject({ action: 'allow', reason: 'allow_entry', rule: 'good.lab' });
    expect(d('API.good.lab.')).toMatchObject({ action: 'allow', rule: 'good.lab' });
    expect(d('pinned.lab')).toMatchObject({ action: 'allow', rule: 'pinned.lab:8443' });
    expect(d('x.wild.lab')).toMatchObject({ action: 'allow', rule: '*.wild.lab' });
    expect(d('wild.lab')).toMatchObject({ action: 'block', reason: 'not_allowed' });
    expect(d('evil.good.lab')).toMatchObject({ action: 'block', reason: 'deny_entry' });
    expect(d('port.good.lab')).toMatchObject({ action: 'allow' }); // denied on 443 only
    expect(d('exfil-0123.attacker.example')).toMatchObject({ action: 'block', reason: 'not_allowed' });
  });

  it('IP-only entries allow reverse lookups of their addresses only', () => {
    expect(decideDnsName('10.2.19.198.in-addr.arpa', white)).toMatchObject({ action: 'allow', rule: '198.19.2.0/24' });
    expect(decideDnsName('10.1.18.198.in-addr.arpa', white)).toMatchObject({ action: 'block' });
    const v6 = [...'20010db8000200000000000000000010'].reverse().join('.') + '.ip6.arpa';
    expect(ptrAddress(v6)).toBe('2001:0db8:0002:0000:0000:0000:0000:0010');
    expect(decideDnsName(v6, white)).toMatchObject({ action: 'allow', rule: '2001:db8:2::10' });
    expect(decideDnsName('19.198.in-addr.arpa', white)).toMatchObject({ action: 'block' });
  });

  it('blacklist: anything not denied on every port; no policy refuses', () => {
    expect(decideDnsName('anything.example', black)).toMatchObject({ action: 'allow', reason: 'mode_allow' });
    expect(decideDnsName('www.evil.lab', black)).toMatchObject({ action: 'block', reason: 'deny_entry' });
    expect(decideDnsName('port.lab', black)).toMatchObject({ action: 'allow' });
    expect(decideDnsName('30.1.18.198.in-addr.arpa', black)).toMatchObject({ action: 'block', rule: '198.18.1.30' });
    expect(decideDnsName('good.lab', null)).toMatchObject({ action: 'block', reason: 'no_policy' });
  });
});

// --- the forwarder, live on loopback with a counting upstream -------------------------------------------------------

interface Up {
  port: number;
  seen: string[];
  close(): void;
}
async function upstream(names: Record<string, string[]>, opts: { truncate?: boolean } = {}): Promise<Up> {
  const seen: string[] = [];
  const udp = dgram.createSocket('udp4');
  udp.on('message', (msg, r) => {
    seen.push(`udp:${msg.toString('hex')}`);
    const ans = answerDns(msg, names);
    if (!ans) return;
    if (opts.truncate) {
      // Header with TC and no answers, then the question (the forwarder's query carries no OPT here).
      const tc = Buffer.from(ans.subarray(0, 12));
      tc.writeUInt16BE(tc.readUInt16BE(2) | 0x0200, 2);
      tc.writeUInt16BE(0, 6);
      udp.send(Buffer.concat([tc, msg.subarray(12)]), r.port, r.address);
      return;
    }
    udp.send(ans, r.port, r.address);
  });
  await new Promise<void>((res) => udp.bind(0, '127.0.0.1', () => res()));
  const port = udp.address().port;
  const tcp = net.createServer((s) => {
    let acc = Buffer.alloc(0);
    s.on('data', (d: Buffer) => {
      acc = Buffer.concat([acc, d]);
      if (acc.length >= 2 && acc.length >= 2 + acc.readUInt16BE(0)) {
        const q = acc.subarray(2, 2 + acc.readUInt16BE(0));
        seen.push(`tcp:${q.toString('hex')}`);
        const ans = answerDns(q, names)!;
        const len = Buffer.alloc(2);
        len.writeUInt16BE(ans.length);
        s.end(Buffer.concat([len, ans]));
      }
    });
  });
  await new Promise<void>((res) => tcp.listen(port, '127.0.0.1', () => res()));
  return { port, seen, close: () => (udp.close(), tcp.close()) };
}

function ask(port: number, msg: Buffer): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const s = dgram.createSocket('udp4');
    const t = setTimeout(() => (s.close(), resolve(null)), 700);
    s.on('message', (m) => (clearTimeout(t), s.close(), resolve(m)));
    s.send(msg, port, '127.0.0.1');
  });
}

function askTcp(port: number, msg: Buffer): Promise<Buffer | string> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const len = Buffer.alloc(2);
    len.writeUInt16BE(msg.length);
    let acc = Buffer.alloc(0);
    s.on('connect', () => s.write(Buffer.concat([len, msg])));
    s.on('data', (d: Buffer) => {
      acc = Buffer.concat([acc, d]);
      if (acc.length >= 2 && acc.length >= 2 + acc.readUInt16BE(0)) {
        s.destroy();
        resolve(acc.subarray(2));
      }
    });
    s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'ERR'));
    s.on('close', () => resolve('closed'));
  });
}

const rcodeOf = (m: Buffer | null | string) => (Buffer.isBuffer(m) ? m.readUInt16BE(2) & 0xf : m);
let nextPort = 20000 + Math.floor(Math.random() * 30000);

describe('the DNS forwarder', () => {
  let fwd: DnsForwarder<CompiledPolicy> | null = null;
  let up: Up | null = null;
  afterEach(async () => {
    await fwd?.close();
    up?.close();
    fwd = null;
    up = null;
  });

  async function start(
    p: CompiledPolicy | null,
    o: { truncate?: boolean; refuse?: 'nxdomain'; origPort?: number } = {},
  ) {
    up = await upstream({ 'good.lab': ['198.18.1.10', '2001:db8:1::10'], 'evil.lab': ['198.18.1.20'] }, o);
    const lines: DecisionRecord[] = [];
    fwd = createDnsForwarder<CompiledPolicy>({
      decide: decideDnsName,
      log: { write: (r) => (lines.push(r), 'ref') },
      hosts: ['127.0.0.1'],
      timeoutMs: 500,
      refuse: o.refuse,
      originalDst: () => ({ family: 4, address: '198.18.1.53', port: o.origPort ?? 53 }),
    });
    const port = nextPort++;
    await fwd.setSubject({ uid: 4242, port, policy: p, resolvers: [`127.0.0.1:${up.port}`] });
    return { port, lines, up: up!, fwd: fwd! };
  }
  const white = () => policy({ mode: 'whitelist', allow: ['good.lab'], deny: [] });

  it("forwards an allowed name (a re-built query) and answers with the resolver's answer; remembers the addresses", async () => {
    const { port, lines, up: u, fwd: f } = await start(white());
    const ans = await ask(port, query('GOOD.lab', 1, { id: 0x7777 }));
    expect(ans!.readUInt16BE(0)).toBe(0x7777);
    expect(readAnswer(ans!, 0x7777, { name: 'GOOD.lab', qtype: 1, qclass: 1 })!.addresses).toEqual([
      { address: '198.18.1.10', ttl: 30 },
    ]);
    expect(u.seen).toHaveLength(1);
    expect(u.seen[0]!.startsWith('udp:')).toBe(true);
    expect(u.seen[0]!.slice(4 + 4)).toBe(query('GOOD.lab').toString('hex').slice(4)); // only the id differs
    expect(f.seen(4242, 'good.lab')).toEqual(['198.18.1.10']);
    expect(lines).toEqual([
      expect.objectContaining({
        uid: 4242,
        action: 'allow',
        reason: 'allow_entry',
        subject: { dns: 'good.lab', qtype: 'A' },
      }),
    ]);
  });

  it('refuses a name outside the whitelist with REFUSED (or NXDOMAIN) and sends nothing upstream', async () => {
    const { port, lines, up: u } = await start(white());
    expect(rcodeOf(await ask(port, query('data-c2VjcmV0.evil.lab')))).toBe(RCODE.REFUSED);
    expect(u.seen).toEqual([]);
    expect(lines).toEqual([
      expect.objectContaining({
        action: 'block',
        reason: 'not_allowed',
        subject: { dns: 'data-c2vjcmv0.evil.lab', qtype: 'A' },
      }),
    ]);
    await fwd!.close();
    up!.close();
    const nx = await start(white(), { refuse: 'nxdomain' });
    expect(rcodeOf(await ask(nx.port, query('evil.lab')))).toBe(RCODE.NXDOMAIN);
    expect(nx.up.seen).toEqual([]);
  });

  it('never forwards bytes that are not a strict query; answers FORMERR when it can', async () => {
    const { port, lines, up: u } = await start(policy({ mode: 'blacklist', allow: [], deny: [] }));
    expect(await ask(port, Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'))).not.toBeNull();
    expect(rcodeOf(await ask(port, query('good.lab', 1, { extra: Buffer.from('tunnel') })))).toBe(RCODE.FORMERR);
    expect(await ask(port, Buffer.from('short'))).toBeNull();
    expect(u.seen).toEqual([]);
    // "GE" "T " read as a header is opcode 10: NOTIMP.
    expect(lines.map((l) => l.reason)).toEqual(['dns_unsupported', 'dns_malformed', 'dns_malformed']);
  });

  it('a subject without a policy gets REFUSED for everything', async () => {
    const { port, up: u, lines } = await start(null);
    expect(rcodeOf(await ask(port, query('good.lab')))).toBe(RCODE.REFUSED);
    expect(u.seen).toEqual([]);
    expect(lines[0]).toMatchObject({ reason: 'no_policy' });
  });

  it('a subject without a policy follows the fail_mode pushed last: forwarded under open, REFUSED again under closed', async () => {
    const { port, up: u, lines, fwd: f } = await start(null);
    f.setFailMode('open');
    expect(rcodeOf(await ask(port, query('good.lab')))).toBe(RCODE.NOERROR);
    expect(u.seen).toHaveLength(1);
    expect(lines[0]).toMatchObject({ action: 'allow', reason: 'no_policy' });
    f.setFailMode('closed');
    expect(rcodeOf(await ask(port, query('good.lab')))).toBe(RCODE.REFUSED);
    expect(u.seen).toHaveLength(1);
  });

  it('retries over TCP when the UDP answer is truncated', async () => {
    const { port, up: u } = await start(white(), { truncate: true });
    const ans = await ask(port, query('good.lab', 28));
    expect(rcodeOf(ans)).toBe(RCODE.NOERROR);
    expect(readAnswer(ans!, 0x1234, { name: 'good.lab', qtype: 28, qclass: 1 })!.addresses[0]!.address).toBe(
      '2001:db8:1::10',
    );
    expect(u.seen.map((s) => s.slice(0, 3))).toEqual(['udp', 'tcp']);
  });

  it('a resolver that never answers: the next one is asked after the time-out; none answering is SERVFAIL', async () => {
    const silent = dgram.createSocket('udp4');
    const heard: Buffer[] = [];
    silent.on('message', (m) => heard.push(m));
    await new Promise<void>((res) => silent.bind(0, '127.0.0.1', () => res()));
    const silentAt = `127.0.0.1:${silent.address().port}`;
    try {
      up = await upstream({ 'good.lab': ['198.18.1.10'] });
      const lines: DecisionRecord[] = [];
      fwd = createDnsForwarder<CompiledPolicy>({
        decide: decideDnsName,
        log: { write: (r) => (lines.push(r), 'ref') },
        hosts: ['127.0.0.1'],
        timeoutMs: 200,
      });
      const port = nextPort++;
      await fwd.setSubject({ uid: 4242, port, policy: white(), resolvers: [silentAt, `127.0.0.1:${up.port}`] });
      const t0 = Date.now();
      const ans = await ask(port, query('good.lab', 1, { id: 0x0101 }));
      expect(rcodeOf(ans)).toBe(RCODE.NOERROR);
      expect(ans!.readUInt16BE(0)).toBe(0x0101);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
      expect(heard).toHaveLength(1);
      expect(up.seen).toHaveLength(1);
      await fwd.setSubject({ uid: 4242, port, policy: white(), resolvers: [silentAt] });
      expect(rcodeOf(await ask(port, query('good.lab', 1, { id: 0x0202 })))).toBe(RCODE.SERVFAIL);
      expect(heard).toHaveLength(2);
      expect(lines.at(-1)).toMatchObject({ action: 'block', reason: 'dns_upstream_failed' });
    } finally {
      silent.close();
    }
  });

  it('serves DNS over TCP to redirected connections only', async () => {
    const { port, up: u } = await start(white());
    const ans = await askTcp(port, query('good.lab'));
    expect(rcodeOf(ans)).toBe(RCODE.NOERROR);
    expect(u.seen).toHaveLength(1);
    await fwd!.close();
    up!.close();
    const direct = await start(white(), { origPort: 18501 });
    expect(await askTcp(direct.port, query('good.lab'))).toBe('ECONNRESET');
    expect(direct.lines[0]).toMatchObject({ action: 'block', reason: 'not_redirected' });
    expect(direct.up.seen).toEqual([]);
  });

  it('writes at most allowLinesPerSec allow lines a second, and counts the rest; blocks are never dropped', async () => {
    up = await upstream({ 'good.lab': ['198.18.1.10'] });
    const lines: DecisionRecord[] = [];
    fwd = createDnsForwarder<CompiledPolicy>({
      decide: decideDnsName,
      log: { write: (r) => (lines.push(r), 'ref') },
      hosts: ['127.0.0.1'],
      allowLinesPerSec: 3,
    });
    const port = nextPort++;
    await fwd.setSubject({ uid: 1, port, policy: white(), resolvers: [`127.0.0.1:${up.port}`] });
    await Promise.all([...Array(10)].map(() => ask(port, query('good.lab'))));
    await Promise.all([...Array(10)].map(() => ask(port, query('evil.lab'))));
    const allows = lines.filter((l) => l.action === 'allow');
    expect(allows.length).toBeLessThanOrEqual(6); // 3 a second, the run may straddle a second
    expect(allows.length).toBeGreaterThanOrEqual(3);
    expect(lines.filter((l) => l.action === 'block')).toHaveLength(10);
  });
});
