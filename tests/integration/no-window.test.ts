/**
 * No window (issue 40), the daemon's side: a policy write and `leash reload` return only once the change is in force,
 * so the agent's very next operation meets it. The service runs for real inside the lab's agent namespace (its nft
 * rules are that namespace's own), discovers this test's leash-t4b* accounts from a passwd file of its own, and marks
 * only a tmpfs this test mounts; the agent's operations run as the leashed account.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import { AGENT_LOOP, type LoopCounts } from '../lab/agent-loop.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');
const ROUNDS = 20;

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

describe.skipIf(!canRunLab)('no window: a write or a reload returns once it is in force (root, lab, tmpfs)', () => {
  const lab = useLab('l40b');
  let dir = '';
  let mnt = '';
  let env: NodeJS.ProcessEnv = {};
  let agent!: LabUser;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  const cfg = () => path.join(dir, 'leash.yaml');

  /** The CLI as root with the service's own config, state dir, passwd and pid file (it signals that pid). */
  const leash = (args: string[]) => run([process.execPath, CLI, '-c', cfg(), ...args], env);
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
  const tlsAs = async (u: LabUser, host: string) => {
    const addr = LAB.hosts.find((h) => h.name === host)!.v4;
    const [res] = await lab.get().probe(u, [{ kind: 'tls', host: addr, port: 443, servername: host }]);
    return res!.ok ? 'ok' : (res!.code ?? 'fail');
  };

  /** Starts the service as systemd would (ExecStart), in the agent namespace; waits for ready. */
  const spawnSvc = () => {
    const child = spawn(
      'ip',
      ['netns', 'exec', lab.get().agentNs, 'timeout', '-s', 'KILL', '600', process.execPath, CLI, '-c', cfg()],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    lab.get().defer(`stop leash service pid ${child.pid}`, () => stopChild(child, 10_000));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    return child;
  };
  const startSvc = async () => {
    svcErr = '';
    if (fs.existsSync(env.LEASH_PID_FILE!)) fs.rmSync(env.LEASH_PID_FILE!);
    svc = spawnSvc();
    await waitForServiceReady(
      svc,
      () => svcErr,
      () => fs.existsSync(env.LEASH_PID_FILE!),
    );
  };
  /** ExecStopPost as systemd runs it after the main process ended with `result`. */
  const stopPost = (result: string, exitCode: string, status: string) =>
    run(['ip', 'netns', 'exec', lab.get().agentNs, process.execPath, CLI, 'teardown'], {
      ...env,
      SERVICE_RESULT: result,
      EXIT_CODE: exitCode,
      EXIT_STATUS: status,
    });
  /** `leash status --subject` as root in the agent namespace (whose nft map it reads): each surface's `enforced`. */
  const enforcedFor = (u: LabUser) => {
    const r = run(
      [
        'ip',
        'netns',
        'exec',
        lab.get().agentNs,
        process.execPath,
        CLI,
        '-c',
        cfg(),
        'status',
        '--subject',
        u.name,
        '--json',
      ],
      env,
    );
    const st = JSON.parse(r.out) as { surfaces: Record<string, { enforced: boolean }> };
    return Object.fromEntries(Object.entries(st.surfaces).map(([k, v]) => [k, v.enforced]));
  };
  const ruleset = () => run(['ip', 'netns', 'exec', lab.get().agentNs, 'nft', 'list', 'ruleset']).out;
  /** The agent loop (helpers/agent-loop.ts) as `u` for `ms`: a denied read and a denied page, counted. */
  const loopAs = (u: LabUser, file: string, ms: number): Promise<LoopCounts> => {
    const script = path.join(dir, 'loop.mjs');
    fs.writeFileSync(script, AGENT_LOOP, { mode: 0o644 });
    const other = LAB.hosts.find((h) => h.name === 'other.lab')!.v4;
    const child = spawn(
      'ip',
      ['netns', 'exec', lab.get().agentNs, 'setpriv', `--reuid=${u.uid}`, `--regid=${u.gid}`, '--clear-groups'].concat(
        ['timeout', '-s', 'KILL', String(Math.ceil(ms / 1000) + 30), process.execPath, script, file, other, '80'],
        ['nope.lab', String(ms)],
      ),
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    lab.get().defer(`stop agent loop pid ${child.pid}`, () => stopChild(child, 2000));
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (out += d));
    return new Promise((resolve, reject) =>
      child.on('exit', () => {
        try {
          resolve(JSON.parse(out.trim().split('\n').pop()!) as LoopCounts);
        } catch {
          reject(new Error(`agent loop: ${out}`));
        }
      }),
    );
  };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  beforeAll(async () => {
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'l40b-'));
    fs.chmodSync(dir, 0o755);
    mnt = path.join(dir, 'fs');
    fs.mkdirSync(mnt);
    const m = run(['mount', '-t', 'tmpfs', '-o', 'size=8m,mode=0755', 'leash-l40b', mnt]);
    if (m.code !== 0) throw new Error(m.err);
    l.defer(`umount ${mnt}`, () => run(['umount', '-l', mnt]));
    fs.writeFileSync(path.join(mnt, 'held'), 'x\n', { mode: 0o644 });
    for (let i = 0; i < ROUNDS; i++) {
      fs.writeFileSync(path.join(mnt, `cli${i}`), 'x\n', { mode: 0o644 });
      fs.writeFileSync(path.join(mnt, `rl${i}`), 'x\n', { mode: 0o644 });
    }
    agent = await l.createUser('leash-t4b1');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${agent.name}:x:${agent.uid}:${agent.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      cfg(),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab, evil.lab, other.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: blacklist, allow: [], deny: [${mnt}/held] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [read_file], deny: [] }
logging: { level: info, decisions: ${path.join(dir, 'decisions.jsonl')} }
`,
    );
    env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_WATCHER_TIMEOUT_S: '600',
      LEASH_RELOAD_TIMEOUT_S: '60',
      // A failed start holds the agents closed only as the host's service (systemd sets INVOCATION_ID).
      LEASH_HOLD_CLOSED: '1',
    };
    await startSvc();
  }, 120_000);

  afterAll(async () => {
    if (svc && svc.exitCode === null) await stopChild(svc, 10_000);
  }, 30_000);

  it(`a deny written by the CLI is in force when the CLI returns: ${ROUNDS} of ${ROUNDS} next reads are EPERM`, () => {
    const seen: string[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const f = path.join(mnt, `cli${i}`);
      expect(readAs(agent, f)).toBe('ok');
      const w = leash(['fs', 'deny', f]);
      expect(w.code, w.err + w.out).toBe(0);
      seen.push(readAs(agent, f));
    }
    expect(
      seen.filter((s) => s !== 'EPERM'),
      svcErr.slice(-2000),
    ).toEqual([]);
  }, 240_000);

  it(`leash reload returns once the policy on disk is in force: ${ROUNDS} of ${ROUNDS} next reads are EPERM`, () => {
    const seen: string[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const f = path.join(mnt, `rl${i}`);
      expect(readAs(agent, f)).toBe('ok');
      expect(leash(['fs', 'deny', f, '--no-reconcile']).code).toBe(0);
      const r = leash(['reload', '--json']);
      expect(r.code, r.err + r.out).toBe(0);
      expect(JSON.parse(r.out)).toMatchObject({ sent: true, via: 'pidfile' });
      seen.push(readAs(agent, f));
    }
    expect(
      seen.filter((s) => s !== 'EPERM'),
      svcErr.slice(-2000),
    ).toEqual([]);
  }, 240_000);

  it('a network deny is in force when the CLI returns: the next connection is reset', async () => {
    expect(await tlsAs(agent, 'evil.lab')).toBe('ok');
    const w = leash(['net', 'deny', 'evil.lab']);
    expect(w.code, w.err + w.out).toBe(0);
    expect(await tlsAs(agent, 'evil.lab')).toBe('ECONNRESET');
  }, 60_000);

  it('a reload that cannot apply the file on disk exits 3 reload_incomplete naming why; the old policy stays', () => {
    const good = fs.readFileSync(cfg(), 'utf8');
    fs.writeFileSync(cfg(), `${good}fail_mode: sideways\n`);
    try {
      const r = leash(['reload', '--json']);
      expect(r.code).toBe(3);
      const out = JSON.parse(r.out) as { error: { code: string; details: { problems: { code: string }[] } } };
      expect(out.error.code).toBe('reload_incomplete');
      expect(out.error.details.problems.length).toBeGreaterThan(0);
      expect(readAs(agent, path.join(mnt, 'cli0'))).toBe('EPERM');
    } finally {
      fs.writeFileSync(cfg(), good);
    }
    expect(leash(['reload']).code).toBe(0);
  }, 60_000);

  it('a crash is closed on the network: SIGKILL, ExecStopPost with SERVICE_RESULT=signal, restart: 0 pages through', async () => {
    const denied = path.join(mnt, 'held');
    expect(readAs(agent, denied)).toBe('EPERM');
    const loop = loopAs(agent, denied, 12_000);
    await sleep(1500);
    // As systemd does when the main process dies: every process of the unit is killed (KillMode), ExecStopPost runs
    // with the result, then the restart after RestartSec=2.
    const killedAt = Date.now();
    process.kill(-svc!.pid!, 'SIGKILL');
    while (svc!.exitCode === null && svc!.signalCode === null) await sleep(10);
    const post = stopPost('signal', 'killed', 'KILL');
    expect(post.code, post.err).toBe(0);
    expect(ruleset()).toMatch(new RegExp(`agent_${agent.uid}`));
    // What status says in the gap: the kernel's map still holds the agent (refused), nothing else does.
    expect(enforcedFor(agent)).toEqual({ network: true, filesystem: false, commands: false, tools: false });
    await sleep(2000);
    await startSvc();
    expect(enforcedFor(agent)).toEqual({ network: true, filesystem: true, commands: true, tools: true });
    const readyMs = Date.now() - killedAt;
    const c = await loop;
    console.log(`crash: ready again ${readyMs} ms after the kill; agent loop ${JSON.stringify(c)}`);
    expect(c.conns).toBeGreaterThan(10);
    expect(c.connsThrough).toBe(0);
    expect(c.refused).toBeGreaterThan(0);
    expect(readAs(agent, denied)).toBe('EPERM');
  }, 90_000);

  it('a start that fails on a bad floor holds every agent closed on the network; a deliberate stop releases all', async () => {
    const denied = path.join(mnt, 'held');
    // A deliberate stop: the service releases everything, and ExecStopPost (result success) finds nothing held.
    expect(await stopChild(svc!, 10_000)).toBe(0);
    expect(stopPost('success', 'exited', '0').code).toBe(0);
    expect(ruleset()).not.toMatch(/leash/);
    const good = fs.readFileSync(cfg(), 'utf8');
    fs.writeFileSync(cfg(), `${good}fail_mode: sideways\n`);
    try {
      svcErr = '';
      const bad = spawnSvc();
      const code = await new Promise<number | null>((r) => bad.on('exit', (c) => r(c)));
      expect(code).toBe(2);
      expect(svcErr).toMatch(/held closed/);
      expect(stopPost('exit-code', 'exited', '2').code).toBe(0);
      const c = await loopAs(agent, denied, 3000);
      console.log(`bad floor: agent loop ${JSON.stringify(c)}`);
      expect(c.conns).toBeGreaterThan(3);
      expect(c.connsThrough).toBe(0);
    } finally {
      fs.writeFileSync(cfg(), good);
    }
    await startSvc();
    expect(readAs(agent, denied)).toBe('EPERM');
  }, 90_000);

  it('the first agent on a host whose service started with none is confined on the next reload, no restart', async () => {
    const held = path.join(mnt, 'held');
    expect(await stopChild(svc!, 10_000)).toBe(0);
    const passwd = path.join(dir, 'passwd');
    const withAgent = fs.readFileSync(passwd, 'utf8');
    fs.writeFileSync(passwd, 'root:x:0:0:root:/root:/bin/bash\n');
    await startSvc();
    expect(readAs(agent, held)).toBe('ok');
    const first = await lab.get().createUser('leash-t4b2');
    fs.writeFileSync(passwd, `${withAgent}${first.name}:x:${first.uid}:${first.gid}::/nonexistent:/usr/sbin/nologin\n`);
    // In passwd, not yet confined: status must not say "on".
    expect(enforcedFor(first)).toEqual({ network: false, filesystem: false, commands: false, tools: false });
    const r = leash(['reload', '--json']);
    expect(r.code, r.err + r.out).toBe(0);
    for (const u of [agent, first]) {
      expect(enforcedFor(u)).toEqual({ network: true, filesystem: true, commands: true, tools: true });
      expect(readAs(u, held)).toBe('EPERM');
      const c = await loopAs(u, held, 1500);
      expect(c.readsThrough + c.connsThrough, JSON.stringify(c)).toBe(0);
      expect(c.reset).toBeGreaterThan(0);
    }
  }, 90_000);
});
