/**
 * The watcher outlives the service (issue 40, items 1 and 6), outside systemd: the service runs for real in the lab's
 * agent namespace with its own state dir, runtime dir and passwd (the test's leash-tol* account), and marks only a
 * tmpfs this test mounts. When the service is SIGKILLed, or stops for a restart (the marker `leash restart` and the
 * package's postinst write), the watcher keeps judging with its last map and the next start adopts it: the agent,
 * looping over a denied read and a denied page as the leashed account, gets nothing through. A deliberate stop still
 * releases everything, and `leash teardown` releases a watcher a service left.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import { AGENT_LOOP, type LoopCounts } from '../lab/agent-loop.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

/**
 * The watcher processes (active and standby) of the service whose pid file is `pidFile`, by PID: a watcher names
 * its role in its title (watcher-main.ts), and has the service's environment.
 */
function watchersOf(pidFile: string): { pid: number; standby: boolean }[] {
  const out: { pid: number; standby: boolean }[] = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const title = fs.readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0')[0]!;
      if (!title.startsWith('leash-watcher')) continue;
      if (!fs.readFileSync(`/proc/${e}/environ`, 'utf8').split('\0').includes(`LEASH_PID_FILE=${pidFile}`)) continue;
      out.push({ pid: Number(e), standby: title === 'leash-watcher-standby' });
    } catch {
      continue;
    }
  }
  return out;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe.skipIf(!canRunLab)('the watcher outlives the service (root, lab, tmpfs)', () => {
  const lab = useLab('tol');
  let dir = '';
  let mnt = '';
  let sock = '';
  let env: NodeJS.ProcessEnv = {};
  let agent!: LabUser;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  const cfg = () => path.join(dir, 'leash.yaml');
  const held = () => path.join(mnt, 'held');

  const readAs = (u: LabUser, file: string) => {
    const c = run([
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
    return c.code === 0 ? 'ok' : /Operation not permitted/.test(c.err) ? 'EPERM' : `fail ${c.code} ${c.err.trim()}`;
  };
  const ruleset = () => run(['ip', 'netns', 'exec', lab.get().agentNs, 'nft', 'list', 'ruleset']).out;
  /** ExecStopPost as systemd runs it after the main process ended with `result` (none: by hand). */
  const stopPost = (result?: string, exitCode?: string, status?: string) =>
    run(['ip', 'netns', 'exec', lab.get().agentNs, process.execPath, CLI, 'teardown'], {
      ...env,
      ...(result ? { SERVICE_RESULT: result, EXIT_CODE: exitCode, EXIT_STATUS: status } : {}),
    });

  const startSvc = async () => {
    svcErr = '';
    if (fs.existsSync(env.LEASH_PID_FILE!)) fs.rmSync(env.LEASH_PID_FILE!);
    const child = spawn(
      'ip',
      ['netns', 'exec', lab.get().agentNs, 'timeout', '-s', 'KILL', '600', process.execPath, CLI, '-c', cfg()],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    lab.get().defer(`stop leash service pid ${child.pid}`, () => stopChild(child, 10_000));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    svc = child;
    await waitForServiceReady(
      child,
      () => svcErr,
      () => fs.existsSync(env.LEASH_PID_FILE!),
    );
  };
  const mainPid = () => Number(fs.readFileSync(env.LEASH_PID_FILE!, 'utf8').trim());
  const exited = async (c: ChildProcess) => {
    while (c.exitCode === null && c.signalCode === null) await sleep(10);
    return c.exitCode;
  };
  /** The active watcher's PID, once its standby holds the group too. */
  const activeWatcher = async () => {
    for (let i = 0; i < 200; i++) {
      const w = watchersOf(env.LEASH_PID_FILE!);
      const act = w.filter((x) => !x.standby);
      if (act.length === 1 && w.some((x) => x.standby)) return act[0]!.pid;
      await sleep(50);
    }
    throw new Error(`no active watcher with a standby on ${sock}: ${JSON.stringify(watchersOf(env.LEASH_PID_FILE!))}`);
  };

  /** The agent loop as `u` for `ms`: a denied read and a denied page, counted (tests/lab/agent-loop.ts). */
  const loopAs = (u: LabUser, ms: number): Promise<LoopCounts> => {
    const script = path.join(dir, 'loop.mjs');
    fs.writeFileSync(script, AGENT_LOOP, { mode: 0o644 });
    const other = LAB.hosts.find((h) => h.name === 'other.lab')!.v4;
    const child = spawn(
      'ip',
      ['netns', 'exec', lab.get().agentNs, 'setpriv', `--reuid=${u.uid}`, `--regid=${u.gid}`, '--clear-groups'].concat(
        ['timeout', '-s', 'KILL', String(Math.ceil(ms / 1000) + 30), process.execPath, script, held(), other, '80'],
        ['other.lab', String(ms)],
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

  beforeAll(async () => {
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'tol-'));
    fs.chmodSync(dir, 0o755);
    sock = path.join(dir, 'watcher.sock');
    // Whatever this test's watchers are when it ends (an orphan a failed assertion left included): ended by PID.
    l.defer('stop the watchers of this test', () => {
      for (const w of watchersOf(env.LEASH_PID_FILE!)) process.kill(w.pid, 'SIGKILL');
    });
    mnt = path.join(dir, 'fs');
    fs.mkdirSync(mnt);
    const m = run(['mount', '-t', 'tmpfs', '-o', 'size=8m,mode=0755', 'leash-tol', mnt]);
    if (m.code !== 0) throw new Error(m.err);
    l.defer(`umount ${mnt}`, () => run(['umount', '-l', mnt]));
    fs.writeFileSync(held(), 'x\n', { mode: 0o644 });
    agent = await l.createUser('leash-tol1');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${agent.name}:x:${agent.uid}:${agent.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      cfg(),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: blacklist, allow: [], deny: [${held()}] }
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
    };
    // Before Leash runs, the agent reads the file: the counts below can fail.
    expect(readAs(agent, held())).toBe('ok');
    await startSvc();
    expect(readAs(agent, held())).toBe('EPERM');
  }, 120_000);

  afterAll(async () => {
    if (svc && svc.exitCode === null) await stopChild(svc, 10_000);
  }, 30_000);

  it('SIGKILL of the service: the watcher keeps judging, the next start adopts it; 0 reads and 0 pages through', async () => {
    const watcher = await activeWatcher();
    const loop = loopAs(agent, 9000);
    await sleep(1500);
    // As systemd with KillMode=process does when the main process dies: that process alone is killed.
    process.kill(mainPid(), 'SIGKILL');
    await exited(svc!);
    const post = stopPost('signal', 'killed', 'KILL');
    expect(post.code, post.err).toBe(0);
    expect(ruleset()).toMatch(new RegExp(`agent_${agent.uid}`));
    // The gap: no service at all, and the same watcher waits on its socket, still judging.
    expect(alive(watcher)).toBe(true);
    for (let i = 0; i < 100 && !fs.existsSync(sock); i++) await sleep(20);
    // What systemd does to /run/leash when the unit ends failed: the socket goes, and the watcher makes it again.
    fs.rmSync(sock);
    for (let i = 0; i < 150 && !fs.existsSync(sock); i++) await sleep(20);
    expect(fs.existsSync(sock)).toBe(true);
    expect(readAs(agent, held())).toBe('EPERM');
    await sleep(1500);
    await startSvc();
    expect(svcErr).toMatch(/watcher adopted/);
    expect(await activeWatcher()).toBe(watcher);
    const c = await loop;
    console.log(`crash: agent loop ${JSON.stringify(c)}`);
    expect(c.reads).toBeGreaterThan(100);
    expect(c.readsThrough).toBe(0);
    expect(c.conns).toBeGreaterThan(10);
    expect(c.connsThrough).toBe(0);
  }, 90_000);

  it('a restart (the marker leash restart and the postinst write): the stop keeps chains and watcher; 0 through', async () => {
    const watcher = await activeWatcher();
    const loop = loopAs(agent, 8000);
    await sleep(1500);
    fs.writeFileSync(path.join(dir, 'restart'), `${Date.now()}\n`);
    expect(await stopChild(svc!, 10_000)).toBe(0);
    // ExecStopPost after a restart's stop: result success, and still nothing released.
    const post = stopPost('success', 'exited', '0');
    expect(post.code, post.err).toBe(0);
    expect(post.out).toMatch(/restart/);
    expect(ruleset()).toMatch(new RegExp(`agent_${agent.uid}`));
    expect(alive(watcher)).toBe(true);
    await startSvc();
    expect(svcErr).toMatch(/watcher adopted/);
    expect(await activeWatcher()).toBe(watcher);
    // The start consumed the marker: the next stop is deliberate again.
    expect(fs.existsSync(path.join(dir, 'restart'))).toBe(false);
    const c = await loop;
    console.log(`restart: agent loop ${JSON.stringify(c)}`);
    expect(c.reads).toBeGreaterThan(100);
    expect(c.readsThrough).toBe(0);
    expect(c.connsThrough).toBe(0);
  }, 90_000);

  it('an upgrade (the watcher script replaced): a new watcher is started, the old one released after; 0 through', async () => {
    const watcher = await activeWatcher();
    const loop = loopAs(agent, 8000);
    await sleep(1500);
    fs.writeFileSync(path.join(dir, 'restart'), `${Date.now()}\n`);
    expect(await stopChild(svc!, 10_000)).toBe(0);
    expect(stopPost('success', 'exited', '0').code).toBe(0);
    // What dpkg does to every file of the package: the build a watcher names itself by changes (adopt.ts).
    const script = path.resolve(__dirname, '../../dist/src/dataplane/watcher/watcher-main.js');
    const now = new Date();
    fs.utimesSync(script, now, now);
    await startSvc();
    expect(svcErr).not.toMatch(/watcher adopted/);
    const fresh = await activeWatcher();
    expect(fresh).not.toBe(watcher);
    for (let i = 0; i < 100 && alive(watcher); i++) await sleep(20);
    expect(alive(watcher)).toBe(false);
    const c = await loop;
    console.log(`upgrade: agent loop ${JSON.stringify(c)}`);
    expect(c.reads).toBeGreaterThan(100);
    expect(c.readsThrough).toBe(0);
    expect(c.connsThrough).toBe(0);
  }, 90_000);

  it('a deliberate stop releases everything: no watcher left, no chain, the agent reads the file', async () => {
    await activeWatcher();
    expect(await stopChild(svc!, 10_000)).toBe(0);
    expect(stopPost('success', 'exited', '0').code).toBe(0);
    expect(watchersOf(env.LEASH_PID_FILE!)).toEqual([]);
    expect(ruleset()).not.toMatch(/leash/);
    expect(readAs(agent, held())).toBe('ok');
  }, 60_000);

  it('LEASH_WATCHER_ORPHAN_S bounds how long a watcher waits for a service: then it releases the host', async () => {
    env.LEASH_WATCHER_ORPHAN_S = '2';
    try {
      await startSvc();
    } finally {
      delete env.LEASH_WATCHER_ORPHAN_S;
    }
    const watcher = await activeWatcher();
    process.kill(mainPid(), 'SIGKILL');
    await exited(svc!);
    await sleep(500);
    expect(alive(watcher)).toBe(true);
    expect(readAs(agent, held())).toBe('EPERM');
    for (let i = 0; i < 200 && alive(watcher); i++) await sleep(25);
    expect(alive(watcher)).toBe(false);
    // The chains are a teardown's to release (a crash keeps them); the filesystem is free again.
    expect(stopPost().code).toBe(0);
    expect(readAs(agent, held())).toBe('ok');
  }, 60_000);

  it('leash teardown by hand releases a watcher a killed service left, and its chains', async () => {
    await startSvc();
    const watcher = await activeWatcher();
    process.kill(mainPid(), 'SIGKILL');
    await exited(svc!);
    for (let i = 0; i < 100 && !fs.existsSync(sock); i++) await sleep(20);
    expect(readAs(agent, held())).toBe('EPERM');
    const r = stopPost();
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/released the watcher/);
    for (let i = 0; i < 100 && alive(watcher); i++) await sleep(20);
    expect(alive(watcher)).toBe(false);
    expect(ruleset()).not.toMatch(/leash/);
    expect(readAs(agent, held())).toBe('ok');
  }, 60_000);
});
