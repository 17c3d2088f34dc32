/**
 * Approvals on the network surface, the whole service for real in the lab: a connection to an `ask` host is held
 * (nothing upstream) until an approver decides over the approvals socket, or its deadline passes. Every probe runs
 * as the leashed account; the approver is `leash approvals` as root; the agent's own UID, and a setuid-root helper
 * it starts, are refused by the socket.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import type { DecisionRecord } from '../../src/log/decisions.js';
import { parseMetricsText, type Sample } from '../../src/metrics/metrics.js';
import { fetchMetrics } from '../../src/metrics/server.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

describe.skipIf(!canRunLab)('approvals: network connections held for a human (root, lab)', () => {
  const lab = useLab('appr');
  let dir = '';
  let env: NodeJS.ProcessEnv = {};
  let asker: LabUser;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  let follower: ChildProcess | null = null;
  let followed = '';
  const decisionsPath = () => path.join(dir, 'decisions.jsonl');
  const decisions = (): DecisionRecord[] =>
    fs.existsSync(decisionsPath())
      ? fs
          .readFileSync(decisionsPath(), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as DecisionRecord)
      : [];
  const leash = (args: string[]) => run([process.execPath, CLI, '-c', path.join(dir, 'leash.yaml'), ...args], env);
  const tlsAs = (u: LabUser, host: string) => {
    const addr = LAB.hosts.find((h) => h.name === host)?.v4 ?? host;
    return lab
      .get()
      .probe(u, [{ kind: 'tls', host: addr, port: 443, servername: host }])
      .then(([r]) => r!);
  };
  /** The next request the follower printed that is not in `seen`. */
  const nextRequest = async (seen: Set<string>): Promise<{ id: string; what: Record<string, unknown> }> => {
    for (let i = 0; i < 200; i++) {
      for (const l of followed.split('\n').filter((x) => x.startsWith('{'))) {
        const ev = JSON.parse(l) as { event: string; request?: { id: string; what: Record<string, unknown> } };
        if (ev.event === 'request' && ev.request && !seen.has(ev.request.id)) {
          seen.add(ev.request.id);
          return ev.request;
        }
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`no request reached the approver: ${followed}\n${svcErr.slice(-2000)}`);
  };
  const seen = new Set<string>();
  const startService = async () => {
    svcErr = '';
    svc = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.get().agentNs,
        'timeout',
        '-s',
        'KILL',
        '300',
        process.execPath,
        CLI,
        '-c',
        path.join(dir, 'leash.yaml'),
      ],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    const s = svc;
    lab.get().defer('stop leash service', () => stopChild(s, 10_000));
    svc.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    await waitForServiceReady(svc, () => svcErr);
  };
  const startFollower = async () => {
    followed = '';
    follower = spawn(process.execPath, [CLI, 'approvals', '--follow', '--json'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const f = follower;
    lab.get().defer('stop approvals follower', () => stopChild(f, 2000));
    follower.stdout!.setEncoding('utf8').on('data', (d: string) => (followed += d));
    follower.stderr!.setEncoding('utf8').on('data', (d: string) => (followed += d));
    // Subscribed once the service counts it (a held request needs a reachable approver).
    for (let i = 0; i < 100; i++) {
      const r = leash(['approvals', '--json']);
      if (r.code === 0) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    await new Promise((res) => setTimeout(res, 300));
  };

  beforeAll(async () => {
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'appr-'));
    fs.chmodSync(dir, 0o755);
    asker = await l.createUser('leash-tap1');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${asker.name}:x:${asker.uid}:${asker.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], ask: [other.lab], deny: [evil.lab], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: blacklist }
commands: { mode: blacklist }
tools: { mode: whitelist }
enforcers: { network: true, filesystem: false, tools: false }
approvals: { deadlines: { network: 3 } }
logging: { level: info, decisions: ${decisionsPath()}, allows: all }
`,
    );
    env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_METRICS_SOCKET: path.join(dir, 'metrics.sock'),
    };
    await startService();
  }, 120_000);

  afterAll(async () => {
    if (follower && follower.exitCode === null) await stopChild(follower, 2000);
    if (svc && svc.exitCode === null) await stopChild(svc, 10_000);
  }, 60_000);

  it('with no approver subscribed an ask is reset at once (approval_unavailable), whatever fail_mode says', async () => {
    const r = await tlsAs(asker, 'other.lab');
    expect(r).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(r.ms).toBeLessThan(1500);
    expect(
      decisions()
        .filter((d) => d.uid === asker.uid)
        .at(-1),
    ).toMatchObject({
      action: 'block',
      reason: 'approval_unavailable',
      rule: 'other.lab',
    });
  });

  it('a held connection passes when allowed once, and the next one asks again', async () => {
    await startFollower();
    const p = tlsAs(asker, 'other.lab');
    const req = await nextRequest(seen);
    expect(req.what).toMatchObject({ domain: 'other.lab', port: 443 });
    const d = leash(['approvals', 'allow', req.id, '--once', '--json']);
    expect(d.code, d.err).toBe(0);
    expect(await p).toMatchObject({ ok: true });
    const mine = decisions().filter((x) => x.approval?.request === req.id);
    expect(mine.map((x) => [x.action, x.reason])).toEqual([
      ['ask', 'ask_entry'],
      ['allow', 'approved_once'],
    ]);
    expect(mine[1]!.approval).toMatchObject({ how: 'once', by: { uid: 0 } });
    // Decided once: a second decision is refused.
    expect(leash(['approvals', 'deny', req.id]).code).toBe(2);

    const p2 = tlsAs(asker, 'other.lab');
    const req2 = await nextRequest(seen);
    expect(req2.id).not.toBe(req.id);
    expect(leash(['approvals', 'deny', req2.id]).code).toBe(0);
    expect(await p2).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(
      decisions()
        .filter((x) => x.approval?.request === req2.id)
        .at(-1),
    ).toMatchObject({
      action: 'block',
      reason: 'approval_denied',
    });
  });

  it('a deadline that passes is a reset (approval_timeout), never an allow', async () => {
    const p = tlsAs(asker, 'other.lab');
    const req = await nextRequest(seen);
    const r = await p;
    expect(r).toMatchObject({ ok: false, code: 'ECONNRESET' });
    expect(r.ms).toBeGreaterThan(2500);
    expect(
      decisions()
        .filter((x) => x.approval?.request === req.id)
        .at(-1),
    ).toMatchObject({
      action: 'block',
      reason: 'approval_timeout',
    });
  });

  it('held approvals are in the metrics (pending gauge, decided and timeout counters) and in leash status', async () => {
    const scrape = async () => parseMetricsText((await fetchMetrics(env.LEASH_METRICS_SOCKET!)) ?? '');
    const val = (xs: Sample[], name: string, labels: Record<string, string>) =>
      xs
        .filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
        .reduce((a, x) => a + x.value, 0);
    const before = await scrape();
    expect(val(before, 'leash_approvals_pending', { surface: 'network' })).toBe(0);
    // The deadline test above timed one out (the first test's unavailable one was never held).
    const timeouts0 = val(before, 'leash_approvals_timeouts_total', { surface: 'network' });
    expect(timeouts0).toBeGreaterThanOrEqual(1);
    expect(val(before, 'leash_approvals_decided_total', { surface: 'network', outcome: 'approval_timeout' })).toBe(
      timeouts0,
    );
    const denied0 = val(before, 'leash_approvals_decided_total', { surface: 'network', outcome: 'approval_denied' });
    const p = tlsAs(asker, 'other.lab');
    const req = await nextRequest(seen);
    const held = await scrape();
    expect(val(held, 'leash_approvals_pending', { surface: 'network' })).toBe(1);
    expect(val(held, 'leash_approvals_pending', { surface: 'tools' })).toBe(0);
    const d = leash(['approvals', 'deny', req.id]);
    // Denied, or (on a loaded machine) timed out first: either way it left the gauge and was counted once.
    expect([0, 2]).toContain(d.code);
    expect(await p).toMatchObject({ ok: false });
    const after = await scrape();
    expect(val(after, 'leash_approvals_pending', { surface: 'network' })).toBe(0);
    const denied = val(after, 'leash_approvals_decided_total', { surface: 'network', outcome: 'approval_denied' });
    const timeouts = val(after, 'leash_approvals_timeouts_total', { surface: 'network' });
    expect(denied - denied0 + (timeouts - timeouts0)).toBe(1);
    if (d.code === 0) expect(denied).toBe(denied0 + 1);
    // leash status reads the same figures.
    const decided = val(after, 'leash_approvals_decided_total', {});
    const st = leash(['status', '--json']);
    expect(st.code, st.err).toBe(0);
    expect((JSON.parse(st.out) as { live: { approvals: unknown } }).live.approvals).toEqual({
      pending: 0,
      decided,
      timeouts,
    });
    expect(leash(['status']).out).toContain(`approvals  held 0  decided ${decided}  timed out ${timeouts}`);
  });

  it("refuses the agent's own UID, and a setuid-root helper the agent starts (approvals_refused)", () => {
    const own = run(
      [
        'setpriv',
        `--reuid=${asker.uid}`,
        `--regid=${asker.gid}`,
        '--clear-groups',
        process.execPath,
        CLI,
        'approvals',
        '--json',
      ],
      env,
    );
    expect(own.code, own.err + own.out).toBe(2);
    expect(own.err + own.out).toContain('approvals_refused');
    // A setuid-root copy of python3 keeps euid 0 when the agent runs it (python does not drop it, unlike a shell).
    const py = path.join(dir, 'py-setuid');
    fs.copyFileSync('/usr/bin/python3', py);
    fs.chmodSync(py, 0o4755);
    const script = `import os, socket, json
s = socket.socket(socket.AF_UNIX); s.connect(${JSON.stringify(env.LEASH_APPROVALS_SOCKET)})
s.sendall(b'{"op":"list","seq":1}\\n'); print(json.dumps({"euid": os.geteuid(), "ruid": os.getuid(), "reply": s.recv(65536).decode()}))`;
    const h = run(['setpriv', `--reuid=${asker.uid}`, `--regid=${asker.gid}`, '--clear-groups', py, '-c', script]);
    expect(h.code, h.err).toBe(0);
    const out = JSON.parse(h.out) as { euid: number; ruid: number; reply: string };
    expect(out.euid).toBe(0); // the helper really ran as root
    expect(out.ruid).toBe(asker.uid);
    expect(JSON.parse(out.reply)).toMatchObject({ ok: false, error: { code: 'approvals_refused' } });
  });

  it('the service stopped with a request pending answers it with a block, never an allow', async () => {
    const p = tlsAs(asker, 'other.lab');
    const req = await nextRequest(seen);
    expect(await stopChild(svc!, 10_000)).toBe(0);
    const r = await p;
    expect(r.ok).toBe(false);
    expect(
      decisions()
        .filter((x) => x.approval?.request === req.id)
        .at(-1),
    ).toMatchObject({
      action: 'block',
      reason: 'approval_cancelled',
    });
    await startService();
    await startFollower();
  });
  it('persist writes an allow entry with its acknowledgement into the agent profile; the next one passes unasked', async () => {
    const p = tlsAs(asker, 'other.lab');
    const req = await nextRequest(seen);
    const before = (svcErr.match(/"msg":"reconciled"/g) ?? []).length;
    const d = leash(['approvals', 'allow', req.id, '--persist']);
    expect(d.code, d.err + d.out).toBe(0);
    expect(await p).toMatchObject({ ok: true });
    for (let i = 0; i < 200 && (svcErr.match(/"msg":"reconciled"/g) ?? []).length <= before; i++)
      await new Promise((r) => setTimeout(r, 50));
    const bindings = fs.readFileSync(path.join(env.LEASH_STATE_DIR!, 'bindings.yaml'), 'utf8');
    expect(bindings).toContain(`agent:${asker.name}`);
    expect(bindings).toContain('network.allow:other.lab:443');
    const shown = leash(['profile', 'show', `approved-${asker.name}`]);
    expect(shown.out).toContain('other.lab:443');
    const n = seen.size;
    expect(await tlsAs(asker, 'other.lab')).toMatchObject({ ok: true });
    expect(
      decisions()
        .filter((x) => x.uid === asker.uid)
        .at(-1),
    ).toMatchObject({
      action: 'allow',
      reason: 'allow_entry',
      rule: 'other.lab:443',
    });
    expect(seen.size).toBe(n);
  });
});
