import { beforeAll, describe, expect, it } from 'vitest';
import type { DecisionRecord } from '../../src/log/decisions.js';
import type { Probe, ProbeResult } from '../lab/probe.js';
import { canRunLab, netPolicy, useLab, type EnforcerHandle, type LabUser } from '../lab/index.js';

// Acting as the leashed accounts inside the lab: every assertion is what the agent sees (a reset, EPERM, the
// upstream's report of where it landed) and what the decision log says.

interface Report {
  proto: string;
  sni?: string | null;
  host?: string | null;
  local: string;
  port: number;
}
function report(r: ProbeResult): Report {
  const a = r.data.indexOf('{');
  const b = r.data.lastIndexOf('}');
  if (a < 0 || b < a) throw new Error(`no upstream report: ${JSON.stringify(r)}`);
  return JSON.parse(r.data.slice(a, b + 1)) as Report;
}
const tls = (host: string, servername: string, port = 443): Probe => ({ kind: 'tls', host, port, servername });
const http = (host: string, hostHeader: string, port = 80): Probe => ({ kind: 'http', host, port, hostHeader });

describe.skipIf(!canRunLab)('network surface in the lab', () => {
  const L = useLab('1');
  let white: LabUser; // whitelist subject
  let black: LabUser; // blacklist subject
  let none: LabUser; // a subject with a listener and no policy
  let enf: EnforcerHandle;
  const linesFor = (uid: number): DecisionRecord[] => enf.decisions().filter((d) => d.uid === uid);

  beforeAll(async () => {
    const lab = L.get();
    white = await lab.createUser('leash-tn1');
    black = await lab.createUser('leash-tn2');
    none = await lab.createUser('leash-tn3');
    enf = await lab.startEnforcer({
      peekTimeoutMs: 500,
      subjects: [
        {
          uid: white.uid,
          port: 18001,
          policy: netPolicy({
            mode: 'whitelist',
            allow: ['good.lab', '198.19.2.0/24', 'other.lab:8443', '[2001:db8:2::10]:80'],
            deny: ['evil.lab'],
          }),
        },
        {
          uid: black.uid,
          port: 18002,
          policy: netPolicy({ mode: 'blacklist', allow: ['evil.lab'], deny: ['evil.lab', '198.18.1.30'] }),
        },
        { uid: none.uid, port: 18003, policy: null },
      ],
    });
  }, 60_000);

  it('an allowed domain works over TLS (SNI) and HTTP (Host), subdomains included', async () => {
    const [t, h, sub] = await L.get().probe(white, [
      tls('198.18.1.10', 'good.lab'),
      http('198.18.1.10', 'good.lab'),
      tls('198.18.1.11', 'api.good.lab', 8443),
    ]);
    expect(t).toMatchObject({ ok: true, code: null });
    expect(report(t!)).toMatchObject({ proto: 'tls', sni: 'good.lab', local: '198.18.1.10', port: 443 });
    expect(report(h!)).toMatchObject({ proto: 'http', host: 'good.lab', local: '198.18.1.10', port: 80 });
    expect(report(sub!)).toMatchObject({ sni: 'api.good.lab', local: '198.18.1.11', port: 8443 });
    expect(linesFor(white.uid).filter((d) => d.action === 'allow')).toHaveLength(3);
  });

  it('a denied domain is reset at once and logged under the subject UID', async () => {
    const before = linesFor(white.uid).length;
    const [t, h] = await L.get().probe(white, [tls('198.18.1.20', 'evil.lab'), http('198.18.1.20', 'evil.lab')]);
    expect(t).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(h).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(t!.ms).toBeLessThan(500);
    const mine = linesFor(white.uid).slice(before);
    expect(mine).toEqual([
      expect.objectContaining({ action: 'block', reason: 'deny_entry', rule: 'evil.lab', surface: 'network' }),
      expect.objectContaining({
        action: 'block',
        reason: 'deny_entry',
        subject: expect.objectContaining({ domain: 'evil.lab' }),
      }),
    ]);
  });

  it('CIDR and host:port rules decide as written', async () => {
    const [cidr, cidrHttp, portOk, portNo, ipLiteral] = await L.get().probe(white, [
      tls('198.19.2.10', 'unlisted.example'),
      http('198.19.2.10', '198.19.2.10'),
      tls('198.18.1.30', 'other.lab', 8443),
      tls('198.18.1.30', 'other.lab', 443),
      http('198.18.1.30', '198.18.1.30'),
    ]);
    // IP-decided allow: the original destination, whatever name was sent.
    expect(report(cidr!)).toMatchObject({ local: '198.19.2.10', sni: 'unlisted.example' });
    expect(report(cidrHttp!)).toMatchObject({ local: '198.19.2.10' });
    expect(report(portOk!)).toMatchObject({ local: '198.18.1.30', port: 8443 });
    expect(portNo).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(ipLiteral).toMatchObject({ ok: false, code: 'ECONNRESET' });
  });

  it('forged SNI/Host: an allowed name sent to another address reaches only the address the proxy resolved', async () => {
    const [t, h, t6] = await L.get().probe(white, [
      tls('198.18.1.20', 'good.lab'),
      http('198.18.1.20', 'good.lab'),
      tls('2001:db8:1::20', 'good.lab'),
    ]);
    expect(report(t!)).toMatchObject({ sni: 'good.lab', local: '198.18.1.10' });
    expect(report(h!)).toMatchObject({ host: 'good.lab', local: '198.18.1.10' });
    expect(report(t6!)).toMatchObject({ sni: 'good.lab', local: '2001:db8:1::10' });
    const forged = linesFor(white.uid).find(
      (d) => d.action === 'allow' && (d.subject as { ip: string }).ip === '198.18.1.20',
    );
    expect(forged?.subject).toMatchObject({ domain: 'good.lab', ip: '198.18.1.20', upstream: '198.18.1.10' });
  });

  it('IPv6 is enforced the same way', async () => {
    const [ok, bad, pinned, pinnedOther] = await L.get().probe(white, [
      tls('2001:db8:1::10', 'good.lab'),
      tls('2001:db8:1::20', 'evil.lab'),
      http('2001:db8:2::10', 'x.invalid', 80),
      http('2001:db8:2::10', 'x.invalid', 8080),
    ]);
    expect(report(ok!)).toMatchObject({ local: '2001:db8:1::10', sni: 'good.lab' });
    expect(bad).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(report(pinned!)).toMatchObject({ local: '2001:db8:2::10', port: 80 });
    expect(pinnedOther).toMatchObject({ ok: false, code: 'ECONNRESET' });
  });

  it('a direct connection to any proxy port (own or another subject) is refused and logged critical', async () => {
    const before = linesFor(white.uid).length;
    const res = await L.get().probe(white, [
      { kind: 'tcp', host: '127.0.0.1', port: 18001, send: 'GET / HTTP/1.1\r\nHost: good.lab\r\n\r\n' },
      { kind: 'tcp', host: '127.0.0.1', port: 18002, send: 'GET / HTTP/1.1\r\nHost: good.lab\r\n\r\n' },
      { kind: 'tcp', host: '::1', port: 18002, send: 'x' },
      { kind: 'tcp', host: '127.0.0.1', port: 18443, send: 'x' },
    ]);
    for (const r of res) expect(r).toMatchObject({ ok: false, code: 'ECONNRESET' });
    const mine = linesFor(white.uid).slice(before);
    expect(mine).toHaveLength(4);
    for (const d of mine) expect(d).toMatchObject({ action: 'block', reason: 'not_redirected', severity: 'critical' });
    // It never landed on the other subject's listener: nothing was written under the other UID.
    expect(linesFor(black.uid).filter((d) => d.reason === 'not_redirected')).toHaveLength(0);
  });

  it('a peer with no leash rules (root) connecting straight to a listener is refused and logged critical', async () => {
    const before = linesFor(black.uid).length;
    const [r] = await L.get().probe(null, [{ kind: 'tcp', host: '127.0.0.1', port: 18002, send: 'x' }]);
    expect(r).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(linesFor(black.uid).slice(before)).toEqual([
      expect.objectContaining({ reason: 'not_redirected', severity: 'critical' }),
    ]);
  });

  it('UDP fails with EPERM except port 53, which lands on the forwarder whatever the destination', async () => {
    const [udpOut, udp6Out, udp53Elsewhere, dnsServer, dnsElsewhere, getaddrinfo, udpToResolver] = await L.get().probe(
      white,
      [
        { kind: 'udp', host: '198.18.1.20', port: 9999 },
        { kind: 'udp', host: '2001:db8:1::20', port: 443 },
        { kind: 'udp', host: '198.18.1.20', port: 53 },
        { kind: 'dnsserver', server: '198.18.1.53', name: 'good.lab' },
        { kind: 'dnsserver', server: '198.18.1.20', name: 'good.lab' },
        { kind: 'dns', name: 'good.lab' },
        { kind: 'udp', host: '198.18.1.53', port: 9999 },
      ],
    );
    expect(udpOut).toMatchObject({ ok: false, code: 'EPERM' });
    expect(udp6Out).toMatchObject({ ok: false, code: 'EPERM' });
    // Port 53 anywhere is redirected to the subject's forwarder: the datagram is sent (and judged there, below).
    expect(udp53Elsewhere).toMatchObject({ ok: true });
    expect(dnsServer).toMatchObject({ ok: true, data: '198.18.1.10' });
    // A "resolver" that is not one (198.18.1.20 runs no DNS): the forwarder answers under the same rules.
    expect(dnsElsewhere).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(getaddrinfo!.ok).toBe(true);
    expect(getaddrinfo!.data.split(',').sort()).toEqual(['198.18.1.10', '2001:db8:1::10']);
    expect(udpToResolver).toMatchObject({ ok: false, code: 'EPERM' });
    expect(linesFor(white.uid)).toContainEqual(
      expect.objectContaining({
        action: 'block',
        reason: 'dns_malformed',
        subject: expect.objectContaining({ bytes: 1 }),
      }),
    );
  });

  it('TCP DNS goes to the forwarder, not the proxy, and is judged by the name it asks', async () => {
    const [w] = await L.get().probe(white, [{ kind: 'dnstcp', server: '198.18.1.53', name: 'good.lab' }]);
    const [wEvil] = await L.get().probe(white, [{ kind: 'dnstcp', server: '198.18.1.53', name: 'evil.lab' }]);
    const [b] = await L.get().probe(black, [{ kind: 'dnstcp', server: '198.18.1.53', name: 'good.lab' }]);
    expect(w).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(wEvil).toMatchObject({ ok: false, code: 'REFUSED' });
    expect(b).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(linesFor(white.uid).at(-1)).toMatchObject({
      action: 'block',
      reason: 'deny_entry',
      subject: { dns: 'evil.lab', qtype: 'A', transport: 'tcp' },
    });
  });

  it('escape attempts: a user namespace, an IPv4-mapped address, a raw socket', async () => {
    const lab = L.get();
    const as = ['setpriv', `--reuid=${white.uid}`, `--regid=${white.gid}`, '--clear-groups'];
    // "root" inside a user namespace of its own: the socket still belongs to the real UID, so the redirect holds.
    const probe = JSON.stringify([tls('198.18.1.20', 'evil.lab'), tls('::ffff:198.18.1.20', 'evil.lab')]);
    const inUserns = await lab.agent([...as, 'unshare', '-Ur', process.execPath, lab.probeScript, probe]);
    expect(inUserns.code).toBe(0);
    const out = JSON.parse(inUserns.stdout) as { uid: number; results: ProbeResult[] };
    expect(out.uid).toBe(0);
    for (const r of out.results) expect(r).toMatchObject({ ok: false, code: 'ECONNRESET' });
    // A raw socket (which nft's TCP redirect would not see) needs CAP_NET_RAW in the namespace's owner.
    const raw = await lab.agent([
      ...as,
      'unshare',
      '-Ur',
      '/usr/bin/python3',
      '-c',
      'import socket\ntry:\n socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP); print("raw ok")\nexcept PermissionError as e: print("EPERM")',
    ]);
    expect(raw.stdout.trim()).toBe('EPERM');
  });

  it("root's traffic is untouched", async () => {
    const [t, u] = await L.get().probe(null, [
      tls('198.18.1.20', 'evil.lab'),
      { kind: 'udp', host: '198.18.1.20', port: 9999 },
    ]);
    expect(report(t!)).toMatchObject({ sni: 'evil.lab', local: '198.18.1.20' });
    expect(u).toMatchObject({ ok: true });
  });

  it('blacklist: allowed unless a deny entry matches; the allow list is not consulted; deny on the address wins', async () => {
    const [good, evil, forged, unlisted] = await L.get().probe(black, [
      tls('198.18.1.10', 'good.lab'),
      tls('198.18.1.20', 'evil.lab'),
      tls('198.18.1.30', 'good.lab'),
      tls('198.19.2.10', 'unlisted.example'),
    ]);
    expect(report(good!)).toMatchObject({ local: '198.18.1.10' });
    expect(evil).toMatchObject({ ok: false, code: 'ECONNRESET' });
    // Denied by its address, so refused at accept, before a byte is read: the reset can beat the client's first
    // write, which takes the error; the probe still reports the reset (src/cli/demo/probe.ts), never EOF.
    expect(forged).toMatchObject({ ok: false, code: 'ECONNRESET', data: '' });
    expect(report(unlisted!)).toMatchObject({ local: '198.19.2.10' });
    expect(linesFor(black.uid).find((d) => d.rule === '198.18.1.30')).toMatchObject({
      action: 'block',
      reason: 'deny_entry',
    });
  });

  it('a subject with a listener but no policy refuses every connection', async () => {
    const [t, h] = await L.get().probe(none, [tls('198.18.1.10', 'good.lab'), http('198.19.2.10', 'x')]);
    // Refused before a byte is read (no policy needs no peek): a reset, even when it beats the client's first write.
    for (const r of [t!, h!]) expect(r).toMatchObject({ ok: false, code: 'ECONNRESET', data: '' });
    expect(linesFor(none.uid).map((d) => d.reason)).toEqual(['no_policy', 'no_policy']);
  });

  it('a reload changes one subject policy without touching the others', async () => {
    const lab = L.get();
    const chainOf = async (uid: number) =>
      (await lab.agent(['nft', '-a', 'list', 'chain', 'ip', 'leash', `agent_${uid}`])).stdout;
    const blackChain = await chainOf(black.uid);
    const spec = JSON.parse((await import('node:fs')).readFileSync(enf.specPath, 'utf8')) as Parameters<
      EnforcerHandle['reload']
    >[0];
    spec.subjects[0]!.policy = netPolicy({ mode: 'whitelist', allow: ['other.lab'] });
    spec.subjects[2]!.port = 18013;
    await enf.reload(spec);
    expect(await chainOf(black.uid)).toBe(blackChain);
    const [good, other] = await lab.probe(white, [tls('198.18.1.10', 'good.lab'), tls('198.18.1.30', 'other.lab')]);
    expect(good).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(report(other!)).toMatchObject({ local: '198.18.1.30' });
    expect(await chainOf(none.uid)).toContain('redirect to :18013');
  });

  it('stopping the enforcer leaves no leash rule in the namespace', async () => {
    expect(await enf.stop()).toBe(0);
    const rs = await L.get().agent(['nft', 'list', 'ruleset']);
    expect(rs.code).toBe(0);
    expect(rs.stdout).not.toMatch(/leash/);
  });
});
