import { beforeAll, describe, expect, it } from 'vitest';
import type { DecisionRecord } from '../../src/log/decisions.js';
import { captureHello, withExtension } from '../lab/client-hello.js';
import { canRunLab, netPolicy, useLab, type EnforcerHandle, type LabUser } from '../lab/index.js';

// Loopback judged by policy, server-speaks-first without the peek wait, every plain-HTTP request judged, ECH.
// As the leashed accounts in the lab, with the default peek time-out (5 s).

describe.skipIf(!canRunLab)('network: loopback, banners, kept-alive HTTP and ECH in the lab', () => {
  const L = useLab('2');
  let white: LabUser; // whitelist, ech refuse (the default)
  let open: LabUser; // whitelist, ech allow
  let enf: EnforcerHandle;
  const linesFor = (uid: number): DecisionRecord[] => enf.decisions().filter((d) => d.uid === uid);

  beforeAll(async () => {
    const lab = L.get();
    white = await lab.createUser('leash-tj1');
    open = await lab.createUser('leash-tj2');
    // Local services of the agent's own host (its namespace), and a server that speaks first upstream.
    await lab.serve('agent', [
      { host: '127.0.0.1', port: 3000 },
      { host: '127.0.0.1', port: 3001 },
      { host: '127.0.0.1', port: 3128 },
      { host: '::1', port: 8080 },
      { host: '::1', port: 8081 },
      { host: '127.0.0.1', port: 2525, banner: true },
    ]);
    await lab.serve('upstream', [
      { host: '198.19.2.10', port: 2222, banner: true },
      { host: '198.19.2.10', port: 2223, hold: true },
    ]);
    const policy = netPolicy({
      mode: 'whitelist',
      allow: ['good.lab', 'localhost:3000', '[::1]:8080', '127.0.0.1:2525', '198.19.2.0/24'],
      deny: ['evil.lab'],
    });
    enf = await lab.startEnforcer({
      subjects: [
        { uid: white.uid, port: 18021, policy },
        { uid: open.uid, port: 18022, policy, ech: 'allow' },
      ],
    });
  }, 60_000);

  it('loopback is judged: an allowed local service works, one not in the policy is reset, IPv6 ::1 too', async () => {
    const before = linesFor(white.uid).length;
    const [ok, no, proxy, ok6, no6] = await L.get().probe(white, [
      { kind: 'tcp', host: '127.0.0.1', port: 3000 },
      { kind: 'tcp', host: '127.0.0.1', port: 3001 },
      { kind: 'tcp', host: '127.0.0.1', port: 3128, send: 'CONNECT evil.lab:443 HTTP/1.1\r\nHost: evil.lab\r\n\r\n' },
      { kind: 'tcp', host: '::1', port: 8080 },
      { kind: 'tcp', host: '::1', port: 8081 },
    ]);
    expect(ok).toMatchObject({ ok: true, data: 'svc:3000\n' });
    expect(no).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(proxy).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(ok6).toMatchObject({ ok: true, data: 'svc:8080\n' });
    expect(no6).toMatchObject({ ok: false, code: 'ECONNRESET' });
    const mine = linesFor(white.uid).slice(before);
    expect(mine.map((d) => [d.action, d.rule ?? d.reason])).toEqual([
      ['allow', 'localhost:3000'],
      ['block', 'not_allowed'],
      ['block', 'not_allowed'],
      ['allow', '[::1]:8080'],
      ['block', 'not_allowed'],
    ]);
    // Judged as localhost and by address, never by a name the agent sends: no peek wait for a refusal either.
    expect(no!.ms).toBeLessThan(1000);
    expect(proxy!.ms).toBeLessThan(1000);
    // Root (no leash rules) still reaches them all.
    const [rootNo] = await L.get().probe(null, [{ kind: 'tcp', host: '127.0.0.1', port: 3001 }]);
    expect(rootNo).toMatchObject({ ok: true, data: 'svc:3001\n' });
  });

  it('a server that speaks first, allowed by address, sends its banner well under a second (peek time-out 5 s)', async () => {
    const [local, remote] = await L.get().probe(white, [
      { kind: 'tcp', host: '127.0.0.1', port: 2525 },
      { kind: 'tcp', host: '198.19.2.10', port: 2222 },
    ]);
    for (const r of [local!, remote!]) {
      expect(r).toMatchObject({ ok: true, data: '220 banner\r\n' });
      expect(r.ms).toBeLessThan(1000);
    }
  });

  it('plain HTTP: a second Host on a kept-alive connection is answered 403 and the connection closed', async () => {
    const before = linesFor(white.uid).length;
    const ka = (h: string) => `GET / HTTP/1.1\r\nHost: ${h}\r\n\r\n`;
    const [r] = await L.get().probe(white, [
      { kind: 'tcp', host: '198.18.1.10', port: 80, send: ka('good.lab') + ka('api.good.lab') + ka('other.lab') },
    ]);
    expect(r!.ok).toBe(true);
    // good.lab answered; api.good.lab (allowed on its own, but another host) and everything after it refused.
    expect((r!.data.match(/HTTP\/1\.1 200/g) ?? []).length).toBe(1);
    expect(r!.data).toContain('"host":"good.lab"');
    expect(r!.data).toMatch(/HTTP\/1\.1 403 Forbidden\r\n[^]*$/);
    expect(r!.data).not.toContain('other.lab');
    expect(linesFor(white.uid).slice(before)).toEqual([
      expect.objectContaining({ action: 'allow', rule: 'good.lab' }),
      expect.objectContaining({
        action: 'block',
        reason: 'http_host_changed',
        subject: expect.objectContaining({ domain: 'api.good.lab', request: 2 }),
      }),
    ]);
  });

  it('ECH: refused under network.ech refuse, judged by its outer name under allow', async () => {
    const hello = (name: string) => withExtension(captured.get(name)!, 0xfe0d, Buffer.alloc(64, 0x5a)).toString('hex');
    const captured = new Map<string, Buffer>();
    for (const n of ['good.lab', 'evil.lab']) captured.set(n, await captureHello(n));
    const wBefore = linesFor(white.uid).length;
    const [refused] = await L.get().probe(white, [
      { kind: 'tcp', host: '198.18.1.10', port: 443, hex: hello('good.lab') },
    ]);
    expect(refused).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(linesFor(white.uid).slice(wBefore)).toEqual([
      expect.objectContaining({
        action: 'block',
        reason: 'ech_refused',
        subject: expect.objectContaining({ ech: true }),
      }),
    ]);
    const oBefore = linesFor(open.uid).length;
    const [good, evil] = await L.get().probe(open, [
      { kind: 'tcp', host: '198.18.1.10', port: 443, hex: hello('good.lab'), firstData: true },
      { kind: 'tcp', host: '198.18.1.20', port: 443, hex: hello('evil.lab') },
    ]);
    // The upstream TLS server answered (a ServerHello record), so the hello went through.
    expect(good!.ok).toBe(true);
    expect(good!.data.charCodeAt(0)).toBe(0x16);
    expect(evil).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(
      linesFor(open.uid)
        .slice(oBefore)
        .map((d) => [d.action, d.reason, (d.subject as { domain: string }).domain]),
    ).toEqual([
      ['allow', 'allow_entry', 'good.lab'],
      ['block', 'deny_entry', 'evil.lab'],
    ]);
  });

  it('out of descriptors (RLIMIT_NOFILE 200), the service refuses the excess, logs it bounded, and keeps serving', async () => {
    const lab = L.get();
    const flooder = await lab.createUser('leash-tj3');
    const small = await lab.startEnforcer({
      nofile: 200,
      subjects: [{ uid: flooder.uid, port: 18023, policy: netPolicy({ allow: ['198.19.2.0/24', 'good.lab'] }) }],
    });
    const [f] = await lab.probe(flooder, [
      { kind: 'flood', host: '198.19.2.10', port: 2223, count: 600, holdMs: 2000 },
    ]);
    const counts = JSON.parse(f!.data) as { open: number; refused: number; errors: number };
    // Some were held open (allowed, connected upstream), the rest refused; none hung or failed otherwise.
    expect(counts.open).toBeGreaterThan(10);
    expect(counts.refused).toBeGreaterThan(100);
    expect(counts.open + counts.refused + counts.errors).toBe(600);
    expect(small.alive()).toBe(true);
    // The flood is gone: the next connection is served at once.
    await new Promise((r) => setTimeout(r, 300));
    const [after] = await lab.probe(flooder, [{ kind: 'tls', host: '198.18.1.10', port: 443, servername: 'good.lab' }]);
    expect(after).toMatchObject({ ok: true });
    expect(after!.ms).toBeLessThan(1000);
    expect(small.alive()).toBe(true);
    // Logged rate-limited: a handful of lines for hundreds of refusals, with the count held back.
    const lines = small
      .stderr()
      .split('\n')
      .filter((l) => l.startsWith('proxy uid='));
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.length).toBeLessThan(20);
    expect(await small.stop()).toBe(0);
  }, 60_000);
});
