/**
 * The whole service, for real, with several agent accounts: `leash` (no subcommand) runs inside the lab's agent
 * namespace (so its nft rules are that namespace's own), discovers leash-* accounts from a passwd file holding only
 * this test's accounts, resolves each through its own profile binding, and enforces network and filesystem for
 * all of them at once. Filesystem paths lie on a tmpfs this test mounts; the watcher runs under a timeout.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import type { DecisionRecord } from '../../src/log/decisions.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');
/** The lab's bulk source: after the first bytes of a connection it sends `bytes` and closes. */
const BULK = { port: 9000, bytes: 64 << 20 };

/**
 * Run as a leashed account inside the agent namespace: opens one connection to the bulk source through the proxy
 * (an HTTP head naming an allowed host, so the proxy decides and splices it), reads at least 1 MiB and pauses,
 * holding the connection open mid-stream. On a `go` line on stdin it resumes and reports how many bytes arrived in
 * all, or the error that ended the connection. Self-contained (node:* only) so the account can run a copy.
 */
const HOLDER = `import net from 'node:net';
const [host, port, name] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
let n = 0;
let held = false;
const s = net.connect({ host, port }, () => s.write('GET / HTTP/1.1\\r\\nHost: ' + name + '\\r\\n\\r\\n'));
s.on('data', (d) => {
  n += d.length;
  if (!held && n >= 1 << 20) {
    held = true;
    s.pause();
    say({ held: n });
  }
});
s.on('error', (e) => { say({ error: e.code ?? String(e), bytes: n }); process.exit(0); });
s.on('end', () => { say({ end: n }); process.exit(0); });
process.stdin.setEncoding('utf8').on('data', (l) => {
  if (l.includes('go')) { say({ resumed: n }); s.resume(); }
});
setTimeout(() => { say({ error: 'ETIMEDOUT', bytes: n }); process.exit(0); }, 240000).unref();
`;

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

describe.skipIf(!canRunLab)('leash service with several agent accounts (root, lab, tmpfs)', () => {
  const lab = useLab('svc', { bulk: BULK });
  let dir = '';
  let mnt = '';
  let env: NodeJS.ProcessEnv = {};
  let users: LabUser[] = [];
  let svc: ChildProcess | null = null;
  let svcErr = '';
  const decisionsPath = () => path.join(dir, 'decisions.jsonl');
  const decisions = (): DecisionRecord[] =>
    fs.existsSync(decisionsPath())
      ? fs
          .readFileSync(decisionsPath(), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as DecisionRecord)
      : [];

  const writePasswd = (accounts: LabUser[]) => {
    const lines = ['root:x:0:0:root:/root:/bin/bash'];
    for (const u of accounts) lines.push(`${u.name}:x:${u.uid}:${u.gid}::/nonexistent:/usr/sbin/nologin`);
    fs.writeFileSync(path.join(dir, 'passwd'), lines.join('\n') + '\n');
  };
  const leash = (args: string[]) => {
    const r = run([process.execPath, CLI, '-c', path.join(dir, 'leash.yaml'), ...args, '--no-reconcile'], env);
    if (r.code !== 0) throw new Error(`leash ${args.join(' ')} -> ${r.code}: ${r.err}${r.out}`);
    return r;
  };
  const chain = (uid: number) => {
    const l = lab.get();
    return run(['ip', 'netns', 'exec', l.agentNs, 'nft', '-a', 'list', 'chain', 'ip', 'leash', `agent_${uid}`]);
  };
  const hupAndWait = async () => {
    const before = (svcErr.match(/"msg":"reconciled"/g) ?? []).length;
    // To the service's own PID, as the CLI does (the pid file): a second SIGHUP sent to the `timeout` wrapper never
    // reached the service here.
    process.kill(Number(fs.readFileSync(env.LEASH_PID_FILE!, 'utf8')), 'SIGHUP');
    for (let i = 0; i < 200; i++) {
      if ((svcErr.match(/"msg":"reconciled"/g) ?? []).length > before) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`no reconcile after SIGHUP:\n${svcErr.slice(-3000)}`);
  };
  /** Reads a file as `u` inside the agent namespace (another mount namespace: FAN_MARK_FILESYSTEM still sees it). */
  const readAs = (u: LabUser, file: string) => {
    const r = run([
      'ip',
      'netns',
      'exec',
      lab.get().agentNs,
      'setpriv',
      `--reuid=${u.uid}`,
      `--regid=${u.gid}`,
      '--clear-groups',
      'timeout',
      '10',
      '/bin/cat',
      file,
    ]);
    return r.code === 0 ? 'ok' : /Operation not permitted/.test(r.err) ? 'EPERM' : `fail ${r.code} ${r.err.trim()}`;
  };
  /** Starts HOLDER as `u`; resolves once its connection is allowed, open, and paused mid-stream. */
  const holdAs = async (u: LabUser, name: string, v4: string) => {
    const script = path.join(dir, 'holder.mjs');
    fs.writeFileSync(script, HOLDER, { mode: 0o644 });
    const child = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.get().agentNs,
        'setpriv',
        `--reuid=${u.uid}`,
        `--regid=${u.gid}`,
        '--clear-groups',
        'timeout',
        '-s',
        'KILL',
        '300',
        process.execPath,
        script,
        v4,
        String(BULK.port),
        name,
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    lab.get().defer(`stop holder pid ${child.pid}`, () => stopChild(child, 2000));
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (out += d));
    const next = async (key: string): Promise<Record<string, unknown>> => {
      for (let i = 0; i < 600; i++) {
        const line = out
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as Record<string, unknown>)
          .find((o) => key in o || 'error' in o);
        if (line) return line;
        if (child.exitCode !== null) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`holder: no ${key}: ${out}`);
    };
    const held = await next('held');
    return {
      held,
      /** Resumes reading: what had arrived when it resumed, and how the connection ended. */
      async finish() {
        child.stdin!.write('go\n');
        const resumed = await next('resumed');
        const end = await next('end');
        return { resumed, end };
      },
    };
  };
  // By the lab address with the name as SNI: the proxy's verdict, whatever the agent's DNS says (its forwarder
  // refuses to resolve a name its policy does not allow, so a lookup by name would fail before the proxy).
  const tlsAs = async (u: LabUser, host: string) => {
    const addr = LAB.hosts.find((h) => h.name === host)?.v4 ?? host;
    const [res] = await lab.get().probe(u, [{ kind: 'tls', host: addr, port: 443, servername: host }]);
    return res!.ok ? 'ok' : (res!.code ?? 'fail');
  };

  beforeAll(async () => {
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'svc-'));
    fs.chmodSync(dir, 0o755);
    mnt = path.join(dir, 'fs');
    fs.mkdirSync(mnt);
    const m = run(['mount', '-t', 'tmpfs', '-o', 'size=8m,mode=0755', 'leash-test', mnt]);
    if (m.code !== 0) throw new Error(m.err);
    l.defer(`umount ${mnt}`, () => run(['umount', '-l', mnt]));
    for (const d of ['a1', 'a2', 'a3', 'a4']) {
      fs.mkdirSync(path.join(mnt, d), { mode: 0o755 });
      fs.writeFileSync(path.join(mnt, d, 'f'), `${d}\n`, { mode: 0o644 });
    }
    users = [];
    for (const n of ['leash-tsa1', 'leash-tsa2', 'leash-tsa3']) users.push(await l.createUser(n));
    writePasswd(users);
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab, evil.lab, other.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: whitelist, allow: [${mnt}], deny: [] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [read_file], deny: [] }
logging: { level: info, decisions: ${decisionsPath()} }
`,
    );
    env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_WATCHER_TIMEOUT_S: '300',
    };
    // Profiles only narrow the floor, so no consent is needed, except p1's tools switch (acknowledged below).
    const prof = (name: string, body: string) => {
      fs.writeFileSync(path.join(dir, `${name}.yaml`), body);
      leash(['profile', 'save', name, '--from', path.join(dir, `${name}.yaml`)]);
    };
    prof('p1', `network: { allow: [good.lab] }\nfilesystem: { allow: [${mnt}/a1] }\nenforcers: { tools: false }\n`);
    prof('p2', `network: { allow: [evil.lab] }\nfilesystem: { allow: [${mnt}/a2] }\n`);
    leash(['bind', 'agent:leash-tsa1', 'p1', '--ack', 'enforcers.tools:false']);
    leash(['bind', 'agent:leash-tsa2', 'p2']);

    svc = spawn(
      'ip',
      [
        'netns',
        'exec',
        l.agentNs,
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
    l.defer('stop leash service', () => stopChild(svc!, 10_000));
    svc.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    await waitForServiceReady(svc, () => svcErr);
  }, 120_000);

  afterAll(async () => {
    try {
      if (svc && svc.exitCode === null) {
        const code = await stopChild(svc, 10_000);
        expect(code, svcErr.slice(-3000)).toBe(0);
        // A stop releases every chain.
        const rules = run(['ip', 'netns', 'exec', lab.get().agentNs, 'nft', 'list', 'ruleset']);
        expect(rules.out, svcErr.slice(-3000)).not.toMatch(/leash/);
      }
    } catch (e) {
      // A failing afterAll skips the hooks after it, the lab's teardown among them: undo the lab here first, so
      // no namespace, account or mount outlives a failed check.
      await lab.get().teardown();
      throw e;
    }
  }, 60_000);

  it('says that a per-agent enforcer switch is not what happens: enforcers run for every subject', () => {
    expect(svcErr).toMatch(/leash-tsa1: its policy switches the tools enforcer off, .*tools stays enforced for it/);
    expect(svcErr).not.toMatch(/leash-tsa2: its policy switches/);
  });

  it('enforces three agents independently on network and filesystem, each logged under its own UID', async () => {
    const [u1, u2, u3] = users as [LabUser, LabUser, LabUser];
    expect(await tlsAs(u1, 'good.lab')).toBe('ok');
    expect(await tlsAs(u1, 'evil.lab')).toBe('ECONNRESET');
    expect(await tlsAs(u2, 'evil.lab')).toBe('ok');
    // Refused before a byte is read (no policy needs no peek): the reset can reach the client before its
    // ClientHello, whose write then takes the error; the probe still reports it as the reset (src/cli/demo/probe.ts).
    expect(await tlsAs(u2, 'good.lab')).toBe('ECONNRESET');
    expect(await tlsAs(u3, 'other.lab')).toBe('ok');
    // Each agent's DNS answers by its own policy: u1 resolves good.lab, u2 is refused it.
    const [d1] = await lab.get().probe(u1, [{ kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' }]);
    const [d2] = await lab.get().probe(u2, [{ kind: 'dnsudp', server: LAB.dnsV4, name: 'good.lab' }]);
    expect(d1).toMatchObject({ ok: true, data: '198.18.1.10' });
    expect(d2).toMatchObject({ ok: false, code: 'REFUSED' });
    expect(readAs(u1, `${mnt}/a1/f`)).toBe('ok');
    expect(readAs(u1, `${mnt}/a2/f`)).toBe('EPERM');
    expect(readAs(u2, `${mnt}/a2/f`)).toBe('ok');
    expect(readAs(u2, `${mnt}/a1/f`)).toBe('EPERM');
    expect(readAs(u3, `${mnt}/a1/f`)).toBe('ok');
    expect(readAs(u3, `${mnt}/a2/f`)).toBe('ok');
    await new Promise((r) => setTimeout(r, 500));
    const d = decisions();
    const has = (uid: number, surface: string, action: string, needle: string) =>
      d.some(
        (r) =>
          r.uid === uid && r.surface === surface && r.action === action && JSON.stringify(r.subject).includes(needle),
      );
    expect(has(u1.uid, 'network', 'block', 'evil.lab')).toBe(true);
    expect(has(u2.uid, 'network', 'block', 'good.lab')).toBe(true);
    expect(has(u1.uid, 'filesystem', 'block', `${mnt}/a2/f`)).toBe(true);
    expect(has(u2.uid, 'filesystem', 'block', `${mnt}/a1/f`)).toBe(true);
  });

  it('leash check --subject gives the verdict the running service enforces, and names the layer', async () => {
    // The operator's dry run, as root with the service's own config, state dir and passwd: for each agent and each
    // destination or file, check's exit code (0 allow, 1 block) matches what the agent really met.
    const check = (u: LabUser, surface: string, subject: string) =>
      run(
        [
          process.execPath,
          CLI,
          '-c',
          path.join(dir, 'leash.yaml'),
          'check',
          surface,
          subject,
          '--subject',
          u.name,
          '--json',
        ],
        env,
      );
    const compared: string[] = [];
    for (const u of users.slice(0, 3)) {
      for (const host of ['good.lab', 'evil.lab', 'other.lab']) {
        const real = await tlsAs(u, host);
        const c = check(u, 'net', `${host}:443`);
        expect(c.code, `${u.name} ${host}: real ${real}, check ${c.out}${c.err}`).toBe(real === 'ok' ? 0 : 1);
        compared.push(`${u.name} ${host} ${real}`);
      }
      for (const d of ['a1', 'a2']) {
        const real = readAs(u, `${mnt}/${d}/f`);
        const c = check(u, 'fs', `${mnt}/${d}/f`);
        expect(c.code, `${u.name} ${d}: real ${real}, check ${c.out}${c.err}`).toBe(real === 'ok' ? 0 : 1);
        compared.push(`${u.name} ${d} ${real}`);
      }
    }
    // Both outcomes were met, so the comparison can tell a check that always allows (or blocks) from the truth.
    expect(compared.some((x) => x.endsWith(' ok'))).toBe(true);
    expect(compared.some((x) => x.endsWith('ECONNRESET'))).toBe(true);
    expect(compared.some((x) => x.endsWith('EPERM'))).toBe(true);
    const j = JSON.parse(check(users[0]!, 'net', 'good.lab:443').out) as Record<string, unknown>;
    expect(j).toMatchObject({ action: 'allow', rule: 'good.lab', layer: 'agent:leash-tsa1=p1' });
    expect(j.for).toMatchObject({ account: 'leash-tsa1', layers: ['floor', 'agent:leash-tsa1=p1'] });
    expect(JSON.parse(check(users[2]!, 'net', 'other.lab:443').out)).toMatchObject({ action: 'allow', layer: 'floor' });
    // An account the service does not confine is refused, not judged against the floor.
    const r = run(
      [
        process.execPath,
        CLI,
        '-c',
        path.join(dir, 'leash.yaml'),
        'check',
        'net',
        'good.lab:443',
        '--subject',
        'root',
        '--json',
      ],
      env,
    );
    expect(r.code).toBe(2);
    expect(JSON.parse(r.out)).toMatchObject({ error: { code: 'subject_not_leashed' } });
  });

  it('SIGHUP after a fourth account leaves the other chains byte-identical; a profile change re-judges one agent', async () => {
    const [u1, u2, u3] = users as [LabUser, LabUser, LabUser];
    const before = users.map((u) => chain(u.uid).out);
    for (const b of before) expect(b).toMatch(/redirect to :18\d\d\d/);
    // An open connection of leash-tsa3, allowed and spliced before either SIGHUP, held mid-stream across both.
    const hold = await holdAs(u3, 'good.lab', LAB.hosts.find((h) => h.name === 'good.lab')!.v4);
    expect(hold.held).toHaveProperty('held');
    const u4 = await lab.get().createUser('leash-tsa4');
    users.push(u4);
    writePasswd(users);
    await hupAndWait();
    expect(chain(u4.uid).code).toBe(0);
    expect([u1, u2, u3].map((u) => chain(u.uid).out)).toEqual(before);
    expect(await tlsAs(u4, 'good.lab')).toBe('ok');

    // Narrow p1 to one subdomain: leash-tsa1 loses good.lab itself; nobody else's chain changes.
    fs.writeFileSync(
      path.join(dir, 'p1.yaml'),
      `network: { allow: [api.good.lab] }\nfilesystem: { allow: [${mnt}/a1] }\n`,
    );
    leash(['profile', 'save', 'p1', '--from', path.join(dir, 'p1.yaml')]);
    await hupAndWait();
    expect(await tlsAs(u1, 'good.lab')).toBe('ECONNRESET');
    expect(await tlsAs(u1, 'api.good.lab')).toBe('ok');
    expect(await tlsAs(u2, 'evil.lab')).toBe('ok');
    expect([u2, u3].map((u) => chain(u.uid).out)).toEqual(before.slice(1));

    // Still mid-stream when resumed (so the rest crossed the connection after both reconciles), and it ran to
    // the end: neither SIGHUP reset it.
    const { resumed, end } = await hold.finish();
    expect(resumed.resumed).toBeLessThan(BULK.bytes);
    expect(end).toEqual({ end: BULK.bytes });
  }, 120_000);

  it('a corrupt ports.json changes nothing applied', async () => {
    const ports = path.join(env.LEASH_STATE_DIR!, 'ports.json');
    const saved = fs.readFileSync(ports);
    const before = users.map((u) => chain(u.uid).out);
    fs.writeFileSync(ports, '{ not json');
    try {
      await hupAndWait();
      expect(svcErr).toMatch(/reconcile changed nothing/);
      expect(users.map((u) => chain(u.uid).out)).toEqual(before);
      expect(await tlsAs(users[1]!, 'evil.lab')).toBe('ok');
      expect(readAs(users[0]!, `${mnt}/a2/f`)).toBe('EPERM');
    } finally {
      fs.writeFileSync(ports, saved);
    }
  });

  it('a dangling profile fails its agent alone: denied on the filesystem, the others untouched', async () => {
    const [u1, u2, u3] = users as [LabUser, LabUser, LabUser];
    const before3 = chain(u3.uid).out;
    fs.rmSync(path.join(env.LEASH_STATE_DIR!, 'profiles', 'p2.yaml'));
    await hupAndWait();
    expect(svcErr).toMatch(/leash-tsa2 \(uid \d+\) fails alone/);
    expect(readAs(u2, `${mnt}/a2/f`)).toBe('EPERM');
    expect(readAs(u1, `${mnt}/a1/f`)).toBe('ok');
    expect(readAs(u3, `${mnt}/a2/f`)).toBe('ok');
    expect(await tlsAs(u3, 'good.lab')).toBe('ok');
    expect(chain(u3.uid).out).toBe(before3);
    // Failed closed: its chain stays, so its TCP still lands on its listener, which refuses with no_policy.
    expect(chain(u2.uid).code).toBe(0);
    expect(chain(u2.uid).out).toMatch(/redirect to :\d+/);
    // Refused before a byte is read (no policy needs no peek): a reset that beats the ClientHello is still reported
    // as the reset (src/cli/demo/probe.ts); the decision lines below say it was refused.
    const first = await tlsAs(u2, 'evil.lab');
    expect(
      first,
      `u2 lines ${JSON.stringify(
        decisions()
          .filter((d) => d.uid === u2.uid)
          .slice(-3),
      )}; chain ${chain(u2.uid).out}; ports ${fs.readFileSync(path.join(env.LEASH_STATE_DIR!, 'ports.json'), 'utf8')}`,
    ).toBe('ECONNRESET');
    expect(await tlsAs(u2, 'good.lab')).toBe('ECONNRESET');
    expect(
      decisions()
        .filter((d) => d.uid === u2.uid && d.surface === 'network')
        .slice(-2)
        .map((d) => [d.action, d.reason]),
    ).toEqual([
      ['block', 'no_policy'],
      ['block', 'no_policy'],
    ]);
  });
});
