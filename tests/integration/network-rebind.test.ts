import { beforeAll, describe, expect, it } from 'vitest';
import type { DecisionRecord } from '../../src/log/decisions.js';
import type { Probe } from '../lab/probe.js';
import { LAB, canRunLab, netPolicy, useLab, type EnforcerHandle, type LabUser } from '../lab/index.js';

// Names that lead into this host or an internal network (issue 37, item 1), tried as the leashed account: the
// policy allows `good.lab` by suffix, and the lab's resolver (the one the proxy and the forwarder use) answers
// names under it with loopback, the agent namespace's own addresses, the metadata address and private ranges.
// Nothing here is ever connected to except loopback and the agent namespace's own (lab) addresses, where small
// services answer so that a connection the proxy did make would show.

const LOCAL: Record<string, string> = {
  'loop4.good.lab': '127.0.0.1',
  'loop6.good.lab': '::1',
  'loop2.good.lab': '127.0.0.2',
  'mapped.good.lab': '::ffff:7f00:1',
  'own4.good.lab': LAB.agentV4,
  'own6.good.lab': LAB.agentV6,
  'meta.good.lab': '169.254.169.254',
  'priv.good.lab': '10.1.2.3',
  'ula.good.lab': 'fd00::1',
};
const names: Record<string, string[]> = { 'intranet.good.lab': ['10.9.9.9'] };
for (const [n, a] of Object.entries(LOCAL)) names[n] = [a];

const tls = (host: string, servername: string, port = 443): Probe => ({ kind: 'tls', host, port, servername });
const http = (host: string, hostHeader: string, port = 80): Probe => ({ kind: 'http', host, port, hostHeader });
const GOOD = LAB.hosts[0]!;

describe.skipIf(!canRunLab)('names never lead into local or internal addresses', () => {
  const L = useLab('l37', { names });
  let agent: LabUser;
  let plain: LabUser; // allows good.lab and nothing local
  let enf: EnforcerHandle;
  const lines = (u = agent): DecisionRecord[] => enf.decisions().filter((d) => d.uid === u.uid);

  beforeAll(async () => {
    const lab = L.get();
    agent = await lab.createUser('leash-t7rebind');
    plain = await lab.createUser('leash-t7rebind2');
    const listen: { host: string; port: number }[] = [];
    for (const host of ['127.0.0.1', '::1', '127.0.0.2', LAB.agentV4, LAB.agentV6])
      for (const port of [80, 443]) listen.push({ host, port });
    listen.push({ host: '127.0.0.1', port: 3000 });
    await lab.serve('agent', listen);
    enf = await lab.startEnforcer({
      peekTimeoutMs: 1000,
      subjects: [
        {
          uid: agent.uid,
          port: 18371,
          policy: netPolicy({ allow: ['good.lab', 'localhost:3000'], rebind_ok: ['intranet.good.lab'] }),
        },
        { uid: plain.uid, port: 18373, policy: netPolicy({ allow: ['good.lab'], rebind_ok: ['intranet.good.lab'] }) },
      ],
    });
  }, 60_000);

  it('refuses every name that resolves to loopback, the host itself, link-local or a private range (HTTP and TLS, IPv4 and IPv6)', async () => {
    const probes: Probe[] = [];
    const cases: { name: string; how: string }[] = [];
    for (const name of Object.keys(LOCAL))
      for (const to of [GOOD.v4, GOOD.v6]) {
        probes.push(http(to, name), tls(to, name));
        cases.push({ name, how: `http via ${to}` }, { name, how: `tls via ${to}` });
      }
    const before = lines().length;
    const results = await L.get().probe(agent, probes);
    const got = results.map((r, i) => ({ ...cases[i]!, ok: r.ok, data: r.data.slice(0, 40) }));
    // Nothing came back from any service: each was reset before the proxy connected anywhere.
    expect(got.filter((r) => r.ok || r.data !== '')).toEqual([]);
    const blocks = lines()
      .slice(before)
      .filter((d) => d.action === 'block');
    const rebinds = blocks.filter((d) => d.reason === 'rebind');
    expect(rebinds).toHaveLength(probes.length);
    expect(
      lines()
        .slice(before)
        .filter((d) => d.action === 'allow'),
    ).toEqual([]);
    for (const [name, addr] of Object.entries(LOCAL)) {
      const mine = rebinds.filter((d) => (d.subject as { domain?: string }).domain === name);
      expect(mine, name).toHaveLength(4);
      // c-ares writes a mapped answer dotted, the forwarder's parser in hex: either spelling is the same address.
      const want = name === 'mapped.good.lab' ? ['::ffff:127.0.0.1', addr] : [addr];
      for (const d of mine) expect(want, name).toContain((d.subject as { upstream?: string }).upstream);
    }
  });

  it('still connects an allowed name to its real address, and a name to an explicitly allowed local entry', async () => {
    const [h4, t6, local, notThatPort] = await L.get().probe(agent, [
      http(GOOD.v4, 'good.lab'),
      tls(GOOD.v6, 'good.lab'),
      http(GOOD.v4, 'loop4.good.lab', 3000),
      http(GOOD.v4, 'loop4.good.lab', 80),
    ]);
    expect(h4).toMatchObject({ ok: true });
    expect(h4!.data).toContain(`"local":"${GOOD.v4}"`);
    expect(t6).toMatchObject({ ok: true });
    expect(t6!.data).toContain(`"local":"${GOOD.v6}"`);
    // localhost:3000 names 127.0.0.1:3000 itself: a name leading there is let through, on that port only.
    expect(local).toMatchObject({ ok: true, data: 'svc:3000\n' });
    expect(notThatPort).toMatchObject({ ok: false, data: '' });
  });

  it('the DNS forwarder lets a loopback answer through where an entry names loopback (localhost:3000)', async () => {
    const [a, aaaa] = await L.get().probe(agent, [
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'loop4.good.lab' },
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'meta.good.lab' },
    ]);
    expect(a).toMatchObject({ ok: true, data: '127.0.0.1' });
    expect(aaaa).toMatchObject({ ok: false, code: 'REFUSED' });
  });

  it('the DNS forwarder refuses answers that lead into local or internal addresses, except for a rebind_ok name', async () => {
    const probes: Probe[] = [];
    for (const [name, addr] of Object.entries(LOCAL))
      for (const server of [LAB.dnsV4, LAB.dnsV6])
        probes.push({ kind: 'dnsudp', server, name, qtype: addr.includes(':') ? 28 : 1 });
    probes.push(
      { kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' },
      { kind: 'dnsudp', server: LAB.dnsV6, name: 'intranet.good.lab' },
    );
    const before = lines(plain).length;
    const results = await L.get().probe(plain, probes);
    const intranet = results.pop()!;
    const good = results.pop()!;
    expect(results.map((r) => r.code)).toEqual(results.map(() => 'REFUSED'));
    expect(good).toMatchObject({ ok: true, data: GOOD.v4 });
    expect(intranet).toMatchObject({ ok: true, data: '10.9.9.9' });
    const rebinds = lines(plain)
      .slice(before)
      .filter((d) => d.reason === 'rebind');
    expect(rebinds.every((d) => d.action === 'block' && d.rule === 'good.lab')).toBe(true);
    expect(
      new Set(
        rebinds.map((d) => `${(d.subject as { dns: string }).dns} ${(d.subject as { address: string }).address}`),
      ),
    ).toEqual(new Set(Object.entries(LOCAL).map(([n, a]) => `${n} ${a}`)));
  });
});
