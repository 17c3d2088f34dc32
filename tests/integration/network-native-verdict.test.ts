import fs from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatDecision, type DecisionRecord } from '../../src/log/decisions.js';
import type { Probe, ProbeResult } from '../../src/cli/demo/probe.js';
import { LAB, canRunLab, netPolicy, useLab, type EnforcerHandle, type Lab, type LabUser } from '../lab/index.js';
import { captureHello } from '../lab/client-hello.js';

// The proxy's native verdict path (issue 43), tried as the leashed account in the lab: which connections it
// decides (the enforcer's `proxy-path` counts on SIGUSR2 say so), that a denied name and a name leading into
// loopback are reset on it with nothing connected, that a policy change reaches its next connection, and that its
// decision lines are, byte for byte, the lines the JavaScript path writes for the same decision.

const GOOD = LAB.hosts[0]!; // good.lab
const EVIL = LAB.hosts[1]!; // evil.lab
// An internal address (10/8): the proxy must never connect there for a name; nothing in the lab answers on it.
const PRIV = '10.1.2.3';
const tls = (host: string, servername: string): Probe => ({ kind: 'tls', host, port: 443, servername });
// The lab's bulk source: after the first bytes it sends BULK_BYTES and closes.
const BULK_PORT = 9443;
const BULK_BYTES = 24 << 20;
// Run as the agent: sends a ClientHello, half-closes at once, then counts what comes back until the end.
const HALF_CLOSE_CLIENT = `
const net = require('net');
const [host, port, hex] = process.argv.slice(1);
let n = 0;
const s = net.connect(Number(port), host, () => { s.write(Buffer.from(hex, 'hex')); s.end(); });
s.on('data', (d) => (n += d.length));
s.on('error', (e) => { console.log(JSON.stringify({ n, error: e.code })); process.exit(0); });
s.on('end', () => console.log(JSON.stringify({ n, error: null })));
`;

interface PathStats {
  relayed: number;
  refused: number;
  toJs: number;
  connectFailed: number;
}

/** Runs `script` (node -e) as the leashed account in the lab's agent namespace. */
function nodeAsAgent(lab: Lab, user: LabUser, script: string, args: string[]) {
  const id = [`--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups'];
  return lab.agent(['setpriv', ...id, process.execPath, '-e', script, ...args]);
}

/** The enforcer's native-path counts now (one SIGUSR2, its stderr line). */
async function pathStats(enf: EnforcerHandle): Promise<PathStats> {
  const seen = (enf.stderr().match(/proxy-path /g) ?? []).length;
  process.kill(enf.pid, 'SIGUSR2');
  for (let i = 0; i < 200; i++) {
    const all = [...enf.stderr().matchAll(/proxy-path (\{.*\})\n/g)];
    if (all.length > seen) return JSON.parse(all[all.length - 1]![1]!) as PathStats;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`no proxy-path line: ${enf.stderr()}`);
}

describe.skipIf(!canRunLab)('network: the native verdict path', () => {
  // loop.good.lab resolves to loopback: allowed by the good.lab entry, it must never be connected to.
  const L = useLab('tnp', {
    names: { 'loop.good.lab': ['127.0.0.1'], 'priv.good.lab': [PRIV] },
    bulk: { port: BULK_PORT, bytes: BULK_BYTES },
  });
  let agent: LabUser;
  let enf: EnforcerHandle;
  const policy = netPolicy({ mode: 'whitelist', allow: ['good.lab'], deny: ['evil.lab'] });
  const lines = (): DecisionRecord[] => enf.decisions().filter((d) => d.uid === agent.uid);

  const stats = () => pathStats(enf);

  async function probe(ps: Probe[]): Promise<ProbeResult[]> {
    return L.get().probe(agent, ps);
  }

  beforeAll(async () => {
    const lab = L.get();
    agent = await lab.createUser('leash-tnp1');
    // A service on loopback in the agent's namespace: a connection the proxy did make there would answer.
    await lab.serve('agent', [{ host: '127.0.0.1', port: 443 }]);
    enf = await lab.startEnforcer({ peekTimeoutMs: 2000, subjects: [{ uid: agent.uid, port: 18431, policy }] });
  }, 60_000);

  it('an allowed name is relayed natively once the proxy has resolved it, and its line is the JavaScript one', async () => {
    const s0 = await stats();
    // The first connection to a name goes to JavaScript (nothing resolved yet); it resolves it for the next.
    const [first] = await probe([tls(GOOD.v4, 'good.lab')]);
    expect(first).toMatchObject({ ok: true });
    const s1 = await stats();
    expect(s1.toJs - s0.toJs).toBe(1);
    const before = lines().length;
    const rs = await probe([tls(GOOD.v4, 'good.lab'), tls(GOOD.v6, 'good.lab'), tls(GOOD.v4, 'good.lab')]);
    for (const r of rs) expect(r).toMatchObject({ ok: true });
    const s2 = await stats();
    expect(s2.relayed - s1.relayed).toBe(3);
    expect(s2.toJs - s1.toJs).toBe(0);
    const mine = lines().slice(before);
    expect(mine.map((d) => [d.action, d.reason, d.rule, d.subject])).toEqual([
      ['allow', 'allow_entry', 'good.lab', { domain: 'good.lab', ip: GOOD.v4, port: 443 }],
      ['allow', 'allow_entry', 'good.lab', { domain: 'good.lab', ip: GOOD.v6, port: 443 }],
      ['allow', 'allow_entry', 'good.lab', { domain: 'good.lab', ip: GOOD.v4, port: 443 }],
    ]);
    // Byte for byte what formatDecision (the JavaScript path's writer) makes of the same record, ts and ref.
    const raw = fs.readFileSync(enf.decisionsPath, 'utf8').split('\n').filter(Boolean);
    for (const text of raw.slice(-3)) {
      const rec = JSON.parse(text) as DecisionRecord & { ts: string; ref: string };
      const { ts, ref, ...rest } = rec;
      expect(formatDecision(rest, ref, new Date(ts))).toBe(`${text}\n`);
    }
  });

  it('a denied name is reset on the native path, logged deny_entry, with nothing sent upstream', async () => {
    // Warm: evil.lab is refused by name before any resolution, so even its first connection stays native.
    const s0 = await stats();
    const before = lines().length;
    const rs = await probe([tls(EVIL.v4, 'evil.lab'), tls(GOOD.v4, 'evil.lab'), tls(EVIL.v6, 'evil.lab')]);
    for (const r of rs) expect(r).toMatchObject({ ok: false, code: 'ECONNRESET', data: '' });
    const s1 = await stats();
    expect(s1.refused - s0.refused).toBe(3);
    expect(s1.relayed - s0.relayed).toBe(0);
    expect(
      lines()
        .slice(before)
        .map((d) => [d.action, d.reason, d.rule, (d.subject as { domain?: string }).domain]),
    ).toEqual([
      ['block', 'deny_entry', 'evil.lab', 'evil.lab'],
      ['block', 'deny_entry', 'evil.lab', 'evil.lab'],
      ['block', 'deny_entry', 'evil.lab', 'evil.lab'],
    ]);
  });

  it('a name resolving into loopback is refused (rebind), never connected, and never relayed natively', async () => {
    const s0 = await stats();
    const before = lines().length;
    // Sent to an outside address, the name's own answer (loopback) is not that address: the native path cannot
    // read the forwarder's answers, so JavaScript decides. Sent to loopback itself, it is judged as localhost.
    const rs = await probe([
      tls(GOOD.v4, 'loop.good.lab'),
      tls(GOOD.v6, 'loop.good.lab'),
      tls('127.0.0.1', 'loop.good.lab'),
    ]);
    for (const r of rs) expect(r).toMatchObject({ ok: false, code: 'ECONNRESET', data: '' });
    const s1 = await stats();
    expect(s1.relayed - s0.relayed).toBe(0);
    expect(s1.toJs - s0.toJs).toBe(2); // the loopback destination never enters the native path
    expect(
      lines()
        .slice(before)
        .map((d) => [d.action, d.reason, (d.subject as { upstream?: string }).upstream ?? null]),
    ).toEqual([
      ['block', 'rebind', '127.0.0.1'],
      ['block', 'rebind', '127.0.0.1'],
      ['block', 'not_allowed', null],
    ]);
  });

  it('a name resolving into an internal range is refused (rebind) natively once resolved, as JavaScript refuses it', async () => {
    const s0 = await stats();
    const before = lines().length;
    const [first] = await probe([tls(PRIV, 'priv.good.lab')]);
    const [second] = await probe([tls(PRIV, 'priv.good.lab')]);
    for (const r of [first, second]) expect(r).toMatchObject({ ok: false, code: 'ECONNRESET', data: '' });
    const s1 = await stats();
    expect(s1.toJs - s0.toJs).toBe(1);
    expect(s1.refused - s0.refused).toBe(1);
    expect(s1.relayed - s0.relayed).toBe(0);
    const mine = lines().slice(before);
    expect(mine.map((d) => [d.action, d.reason, d.rule, d.subject])).toEqual([
      ['block', 'rebind', 'good.lab', { domain: 'priv.good.lab', ip: PRIV, port: 443, upstream: PRIV }],
      ['block', 'rebind', 'good.lab', { domain: 'priv.good.lab', ip: PRIV, port: 443, upstream: PRIV }],
    ]);
    // The JavaScript line and the native one differ only in ts and ref.
    const strip = (d: DecisionRecord) => JSON.stringify({ ...d, ts: undefined, ref: undefined });
    expect(strip(mine[1]!)).toBe(strip(mine[0]!));
  });

  it("a rotated decision log gets the native path's next allow lines, none lost and none twice", async () => {
    const [warm] = await probe([tls(GOOD.v4, 'good.lab')]);
    expect(warm).toMatchObject({ ok: true });
    const s0 = await stats();
    const before = lines().length;
    for (const r of await probe([tls(GOOD.v4, 'good.lab'), tls(GOOD.v6, 'good.lab')]))
      expect(r).toMatchObject({ ok: true });
    // Rotation as logrotate does it: rename, then SIGHUP (the enforcer reopens its log, as the service does).
    const rotated = `${enf.decisionsPath}.1`;
    fs.renameSync(enf.decisionsPath, rotated);
    await enf.reload(JSON.parse(fs.readFileSync(enf.specPath, 'utf8')) as Parameters<EnforcerHandle['reload']>[0]);
    for (const r of await probe([tls(GOOD.v4, 'good.lab'), tls(GOOD.v6, 'good.lab'), tls(GOOD.v4, 'good.lab')]))
      expect(r).toMatchObject({ ok: true });
    const s1 = await stats();
    expect(s1.relayed - s0.relayed).toBe(5);
    const old = fs
      .readFileSync(rotated, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as DecisionRecord)
      .filter((d) => d.uid === agent.uid);
    expect(old.slice(before).map((d) => [d.action, d.reason])).toEqual([
      ['allow', 'allow_entry'],
      ['allow', 'allow_entry'],
    ]);
    expect(lines().map((d) => [d.action, d.reason, (d.subject as { ip?: string }).ip])).toEqual([
      ['allow', 'allow_entry', GOOD.v4],
      ['allow', 'allow_entry', GOOD.v6],
      ['allow', 'allow_entry', GOOD.v4],
    ]);
  });

  it('a native pair whose client half-closes first gets every byte the server sends after it, then a clean end', async () => {
    const [warm] = await probe([tls(GOOD.v4, 'good.lab')]);
    expect(warm).toMatchObject({ ok: true });
    const hello = (await captureHello('good.lab')).toString('hex');
    const s0 = await stats();
    const r = await nodeAsAgent(L.get(), agent, HALF_CLOSE_CLIENT, [GOOD.v4, String(BULK_PORT), hello]);
    expect(r.code).toBe(0);
    // The pair ends with the server's EOF: the pump closes both sockets without a shutdown first; the bytes still
    // queued for the client go before the FIN, never a reset.
    expect(JSON.parse(r.stdout)).toEqual({ n: BULK_BYTES, error: null });
    const s1 = await stats();
    expect(s1.relayed - s0.relayed).toBe(1);
  });

  it('a policy change reaches the very next connection on the native path', async () => {
    const [warm] = await probe([tls(GOOD.v4, 'good.lab')]);
    expect(warm).toMatchObject({ ok: true });
    const spec = JSON.parse(fs.readFileSync(enf.specPath, 'utf8')) as Parameters<EnforcerHandle['reload']>[0];
    spec.subjects[0]!.policy = netPolicy({ mode: 'whitelist', allow: ['other.lab'], deny: ['evil.lab'] });
    await enf.reload(spec);
    const s0 = await stats();
    const before = lines().length;
    const [r] = await probe([tls(GOOD.v4, 'good.lab')]);
    expect(r).toMatchObject({ ok: false, code: 'ECONNRESET', data: '' });
    const s1 = await stats();
    expect(s1.refused - s0.refused).toBe(1);
    expect(
      lines()
        .slice(before)
        .map((d) => [d.action, d.reason, d.rule]),
    ).toEqual([['block', 'not_allowed', null]]);
    // And back: allowed again at once.
    spec.subjects[0]!.policy = policy;
    await enf.reload(spec);
    const [again] = await probe([tls(GOOD.v4, 'good.lab')]);
    expect(again).toMatchObject({ ok: true });
  });
});

describe.skipIf(!canRunLab)('network: the native verdict path under logging.allows summary', () => {
  const L = useLab('tns');

  it('writes no allow line and counts every allowed connection, native or not, into the summary', async () => {
    const lab = L.get();
    const agent = await lab.createUser('leash-tns1');
    const policy = netPolicy({ mode: 'whitelist', allow: ['good.lab'] });
    const enf = await lab.startEnforcer({ allows: 'summary', subjects: [{ uid: agent.uid, port: 18432, policy }] });
    const s0 = await pathStats(enf);
    // The first goes to JavaScript (the name is not resolved yet), the rest natively.
    const rs = await lab.probe(
      agent,
      Array.from({ length: 6 }, () => tls(GOOD.v4, 'good.lab')),
    );
    for (const r of rs) expect(r).toMatchObject({ ok: true });
    const s1 = await pathStats(enf);
    expect(s1.relayed - s0.relayed).toBeGreaterThanOrEqual(4);
    expect(s1.relayed - s0.relayed + (s1.toJs - s0.toJs)).toBe(6);
    // Stopped, it takes the native path's last counts and writes the period's summary.
    expect(await enf.stop()).toBe(0);
    const mine = enf.decisions().filter((d) => d.uid === agent.uid);
    expect(mine.filter((d) => d.action === 'allow' && d.reason !== 'allow_summary')).toEqual([]);
    expect(
      mine
        .filter((d) => d.reason === 'allow_summary')
        .map((d) => [
          d.surface,
          (d.subject as { allowed: number; written: number }).allowed,
          (d.subject as { written: number }).written,
        ]),
    ).toEqual([['network', 6, 0]]);
  });
});

// Run as the agent: holds three TLS connections open, tries a fourth (over a cap of three), closes one, tries a
// fifth; prints what each try got.
const CAP_CLIENT = `
const tls = require('tls');
const [host, port] = process.argv.slice(1);
const open = () => new Promise((resolve) => {
  const s = tls.connect({ host, port: Number(port), servername: 'good.lab', rejectUnauthorized: false });
  s.once('secureConnect', () => resolve({ s, code: null }));
  s.once('error', (e) => resolve({ s, code: e.code || 'ERR' }));
});
(async () => {
  const held = [await open(), await open(), await open()];
  const fourth = await open();
  fourth.s.destroy();
  held[0].s.destroy();
  await new Promise((r) => setTimeout(r, 500));
  const fifth = await open();
  console.log(JSON.stringify({ held: held.map((h) => h.code), fourth: fourth.code, fifth: fifth.code }));
  for (const h of [...held, fifth]) h.s.destroy();
})();
`;

describe.skipIf(!canRunLab)('network: the native verdict path keeps the connection caps exact', () => {
  const HOLD_PORT = 9443;
  const L = useLab('tnc', { holdTls: HOLD_PORT });

  it('a subject at its cap of connections held natively is refused the next; one closed, the next is allowed', async () => {
    const lab = L.get();
    const agent = await lab.createUser('leash-tnc1');
    const policy = netPolicy({ mode: 'whitelist', allow: ['good.lab'] });
    const enf = await lab.startEnforcer({ maxPerSubject: 3, subjects: [{ uid: agent.uid, port: 18433, policy }] });
    // Resolved once (the JavaScript path), so the held ones take the native path.
    const [warm] = await lab.probe(agent, [tls(GOOD.v4, 'good.lab')]);
    expect(warm).toMatchObject({ ok: true });
    const s0 = await pathStats(enf);
    const r = await nodeAsAgent(lab, agent, CAP_CLIENT, [GOOD.v4, String(HOLD_PORT)]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ held: [null, null, null], fourth: 'ECONNRESET', fifth: null });
    const s1 = await pathStats(enf);
    // The three held and the fifth natively; the fourth found the cap before any peek, so JavaScript refused it.
    expect(s1.relayed - s0.relayed).toBe(4);
    expect(enf.stderr()).toMatch(new RegExp(`proxy uid=${agent.uid} capacity: connection cap reached \\(subject\\)`));
    await enf.stop();
  });
});
