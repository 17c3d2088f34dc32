/**
 * A rename-style rotation of the decision log (what logrotate does without copytruncate): the file is renamed, the
 * service gets SIGHUP on its own PID only (logrotate's postrotate, `systemctl reload`), and both writers of the
 * log — the service (network decisions) and the watcher process (filesystem decisions, through a descriptor of its
 * own) — must carry on in a new file at the configured path. Every decision made before, during and after the
 * rotation is in the old file or the new one, exactly once, and every line is whole.
 *
 * The service runs with the unit's CapabilityBoundingSet and NoNewPrivileges (setpriv) and its SystemCallFilter
 * deny list (helpers/unit-seccomp.py, libseccomp), as systemd would apply them: this is also the check that
 * start, nft, fanotify, the proxy, a reload and logrotate's reopen need nothing the unit takes away.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');
const UNIT = path.resolve(__dirname, '../../systemd/leash.service');
/** Applies the unit's SystemCallFilter= deny list with libseccomp (python3-seccomp), then execs. */
const SECCOMP = path.resolve(__dirname, 'helpers/unit-seccomp.py');
const hasSeccomp = spawnSync('/usr/bin/python3', ['-c', 'import seccomp']).status === 0;
const LOGROTATE_CONF = path.resolve(__dirname, '../../packaging/leash.logrotate');
const hasLogrotate = spawnSync('logrotate', ['--version']).status === 0;

/** Run as the leashed account: opens <dir>/f<i> for i in [from, to), one every `gap` ms, and reports the errnos. */
const OPENER = `import fs from 'node:fs';
const [dir, from, to, gap] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4]), Number(process.argv[5])];
const codes = {};
for (let i = from; i < to; i++) {
  try { fs.closeSync(fs.openSync(dir + '/f' + i, 'r')); codes.ok = (codes.ok ?? 0) + 1; }
  catch (e) { codes[e.code] = (codes[e.code] ?? 0) + 1; }
  if (gap > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, gap);
}
process.stdout.write(JSON.stringify(codes) + '\\n');
`;

function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

interface Line {
  ref: string;
  uid: number;
  surface: string;
  action: string;
  subject: unknown;
}

describe.skipIf(!canRunLab)('decision log rotation: rename, SIGHUP, no line lost (root, lab, tmpfs)', () => {
  const lab = useLab('rot');
  let dir = '';
  let mnt = '';
  let user!: LabUser;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  let pidFile = '';
  const log = () => path.join(dir, 'log', 'decisions.jsonl');
  const N = 300;
  const N2 = 360; // f300..f359: the logrotate run
  const N3 = 400; // f360..f399: a SIGHUP to the watcher alone

  const openAs = (from: number, to: number, gap: number): Promise<Record<string, number>> =>
    new Promise((resolve, reject) => {
      const c = spawn('ip', [
        'netns',
        'exec',
        lab.get().agentNs,
        'setpriv',
        `--reuid=${user.uid}`,
        `--regid=${user.gid}`,
        '--clear-groups',
        'timeout',
        '-s',
        'KILL',
        '60',
        process.execPath,
        path.join(dir, 'opener.mjs'),
        path.join(mnt, 'no'),
        String(from),
        String(to),
        String(gap),
      ]);
      let out = '';
      let err = '';
      c.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      c.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
      c.on('close', (code) => {
        try {
          resolve(JSON.parse(out) as Record<string, number>);
        } catch {
          reject(new Error(`opener exited ${code}: ${out}${err}`));
        }
      });
    });
  /** TLS to evil.lab's address under SNI r<i>.evil.lab (not allowed: one network block line each). */
  const tlsAs = async (from: number, to: number) => {
    const evil = LAB.hosts.find((h) => h.name === 'evil.lab')!.v4;
    const probes = [];
    for (let i = from; i < to; i++)
      probes.push({ kind: 'tls' as const, host: evil, port: 443, servername: `r${i}.evil.lab` });
    return (await lab.get().probe(user, probes)).map((r) => (r.ok ? 'ok' : r.code));
  };
  const read = (file: string): Line[] =>
    fs.existsSync(file)
      ? fs
          .readFileSync(file, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Line) // a torn line would throw here
      : [];
  const count = (lines: Line[], surface: string, needle: string) =>
    lines.filter((l) => l.uid === user.uid && l.surface === surface && JSON.stringify(l.subject).includes(needle))
      .length;

  beforeAll(async () => {
    // Root runs the suite: a missing binding is a failure that names it (scripts/install-deps.sh installs it).
    expect(hasSeccomp, 'python3-seccomp is not installed (scripts/install-deps.sh installs it)').toBe(true);
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'rot-'));
    fs.chmodSync(dir, 0o755);
    mnt = path.join(dir, 'fs');
    fs.mkdirSync(mnt);
    const m = run(['mount', '-t', 'tmpfs', '-o', 'size=8m,mode=0755', 'leash-test', mnt]);
    if (m.code !== 0) throw new Error(m.err);
    l.defer(`umount ${mnt}`, () => run(['umount', '-l', mnt]));
    for (const d of ['ok', 'no']) fs.mkdirSync(path.join(mnt, d), { mode: 0o755 });
    for (let i = 0; i < N3; i++) fs.writeFileSync(path.join(mnt, 'no', `f${i}`), 'x', { mode: 0o644 });
    fs.writeFileSync(path.join(dir, 'opener.mjs'), OPENER, { mode: 0o644 });
    user = await l.createUser('leash-tlr1');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${user.name}:x:${user.uid}:${user.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: whitelist, allow: [${mnt}/ok], deny: [] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [], deny: [] }
logging: { level: info, decisions: ${log()} }
`,
    );
    pidFile = path.join(dir, 'leash.pid');
    const env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_PID_FILE: pidFile,
      LEASH_WATCHER_TIMEOUT_S: '300',
    };
    // The unit's capability bounding set, e.g. CAP_SYS_ADMIN CAP_NET_ADMIN -> -all,+sys_admin,+net_admin.
    const caps = /^CapabilityBoundingSet=(.+)$/m.exec(fs.readFileSync(UNIT, 'utf8'))![1]!.trim().split(/\s+/);
    expect(caps.length).toBeGreaterThan(0);
    const bounding = ['-all', ...caps.map((c) => `+${c.replace(/^CAP_/, '').toLowerCase()}`)].join(',');
    svc = spawn(
      'ip',
      [
        'netns',
        'exec',
        l.agentNs,
        'setpriv',
        `--bounding-set=${bounding}`,
        '--no-new-privs',
        '/usr/bin/python3',
        SECCOMP,
        UNIT,
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
    await waitForServiceReady(
      svc,
      () => svcErr,
      () => fs.existsSync(pidFile),
    );
  }, 120_000);

  afterAll(async () => {
    try {
      if (svc && svc.exitCode === null) expect(await stopChild(svc, 10_000), svcErr.slice(-3000)).toBe(0);
    } catch (e) {
      // A failing afterAll skips the hooks after it, the lab's teardown among them: undo the lab here first.
      await lab.get().teardown();
      throw e;
    }
  }, 60_000);

  it('the service runs confined as the unit says: its bounding set, no new privileges, a seccomp filter', () => {
    const status = fs.readFileSync(`/proc/${Number(fs.readFileSync(pidFile, 'utf8'))}/status`, 'utf8');
    const field = (k: string) => new RegExp(`^${k}:\\s*(\\S+)`, 'm').exec(status)?.[1];
    expect(field('NoNewPrivs')).toBe('1');
    expect(field('Seccomp')).toBe('2'); // filter mode
    // CAP_DAC_READ_SEARCH (2), CAP_KILL (5), CAP_NET_ADMIN (12), CAP_SYS_PTRACE (19), CAP_SYS_ADMIN (21): nothing else.
    expect(BigInt(`0x${field('CapBnd')}`)).toBe((1n << 2n) | (1n << 5n) | (1n << 12n) | (1n << 19n) | (1n << 21n));
    expect(field('CapEff')).toBe(field('CapBnd'));
  });

  it('every decision made before, during and after a rename + SIGHUP is in the old or the new file, exactly once', async () => {
    // Before the rotation.
    expect(await openAs(0, 40, 0)).toEqual({ EPERM: 40 });
    expect(await tlsAs(0, 5)).toEqual(Array(5).fill('ECONNRESET'));
    fs.renameSync(log(), `${log()}.1`);
    // Renamed, not yet reopened: both writers still hold the old file.
    expect(await openAs(40, 80, 0)).toEqual({ EPERM: 40 });
    expect(await tlsAs(5, 10)).toEqual(Array(5).fill('ECONNRESET'));
    await new Promise((r) => setTimeout(r, 300)); // the watcher drains queued lines at least every 100 ms

    // During: decisions keep coming while the service (main PID only) is told to reopen.
    const reopenedBefore = (svcErr.match(/"msg":"decision log reopened"/g) ?? []).length;
    const during = Promise.all([openAs(80, 240, 5), tlsAs(10, 20)]);
    await new Promise((r) => setTimeout(r, 200));
    process.kill(Number(fs.readFileSync(pidFile, 'utf8')), 'SIGHUP');
    for (let i = 0; i < 200; i++) {
      if ((svcErr.match(/"msg":"decision log reopened"/g) ?? []).length > reopenedBefore) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(svcErr.match(/"msg":"decision log reopened"/g)?.length ?? 0, svcErr.slice(-3000)).toBe(reopenedBefore + 1);
    const [fsDuring, netDuring] = await during;
    expect(fsDuring).toEqual({ EPERM: 160 });
    expect(netDuring).toEqual(Array(10).fill('ECONNRESET'));

    // After: everything goes to the new file.
    expect(await openAs(240, N, 0)).toEqual({ EPERM: N - 240 });
    expect(await tlsAs(20, 25)).toEqual(Array(5).fill('ECONNRESET'));
    await new Promise((r) => setTimeout(r, 500));

    const oldLines = read(`${log()}.1`);
    const newLines = read(log());
    const all = [...oldLines, ...newLines];
    expect(new Set(all.map((l) => l.ref)).size).toBe(all.length);
    for (let i = 0; i < N; i++) {
      const needle = `/no/f${i}"`;
      expect(count(all, 'filesystem', needle), `f${i}`).toBe(1);
      if (i < 80) expect(count(oldLines, 'filesystem', needle), `f${i} in the old file`).toBe(1);
      if (i >= 240) expect(count(newLines, 'filesystem', needle), `f${i} in the new file`).toBe(1);
    }
    for (let i = 0; i < 25; i++) {
      const needle = `"r${i}.evil.lab"`;
      expect(count(all, 'network', needle), `r${i}`).toBe(1);
      if (i < 10) expect(count(oldLines, 'network', needle), `r${i} in the old file`).toBe(1);
      if (i >= 20) expect(count(newLines, 'network', needle), `r${i} in the new file`).toBe(1);
    }
    expect(fs.statSync(log()).mode & 0o777).toBe(0o600);
  }, 120_000);

  it('the shipped logrotate config rotates the file and its postrotate makes both writers reopen', async () => {
    // Root runs the suite: a missing binary is a failure that names it (scripts/install-deps.sh installs it).
    expect(hasLogrotate, 'logrotate is not installed (scripts/install-deps.sh installs it)').toBe(true);
    // The shipped file with the test's log and PID file in place of /var/log/leash and /run/leash. No systemd runs
    // here (/run/systemd/system is absent), so postrotate takes its PID-file branch.
    const conf = path.join(dir, 'logrotate.conf');
    const shipped = fs.readFileSync(LOGROTATE_CONF, 'utf8');
    expect(shipped).toContain('/var/log/leash/decisions.jsonl {');
    expect(shipped).toContain('/run/leash/leash.pid');
    fs.writeFileSync(
      conf,
      shipped.replace('/var/log/leash/decisions.jsonl', log()).replaceAll('/run/leash/leash.pid', pidFile),
      { mode: 0o644 },
    );
    const lr = (...args: string[]) => run(['logrotate', '-s', path.join(dir, 'logrotate.state'), ...args, conf]);
    const parsed = lr('-d');
    expect(parsed.code, parsed.err).toBe(0);
    expect(parsed.err).not.toMatch(/^error:/m);

    const reopened = () => (svcErr.match(/"msg":"decision log reopened"/g) ?? []).length;
    const before = reopened();
    const current = read(log()).map((l) => l.ref);
    expect(current.length).toBeGreaterThan(0);
    const forced = lr('-f');
    expect(forced.code, forced.err).toBe(0);
    for (let i = 0; i < 200 && reopened() === before; i++) await new Promise((r) => setTimeout(r, 50));
    expect(reopened(), svcErr.slice(-3000)).toBe(before + 1);
    expect(await openAs(N, N2, 0)).toEqual({ EPERM: N2 - N });
    expect(await tlsAs(25, 30)).toEqual(Array(5).fill('ECONNRESET'));
    await new Promise((r) => setTimeout(r, 500));

    // The file rotated by logrotate holds exactly what was there; the new one (made 0600 by `create`) every later line.
    expect(read(`${log()}.1`).map((l) => l.ref)).toEqual(current);
    const fresh = read(log());
    for (let i = N; i < N2; i++) expect(count(fresh, 'filesystem', `/no/f${i}"`), `f${i}`).toBe(1);
    for (let i = 25; i < 30; i++) expect(count(fresh, 'network', `"r${i}.evil.lab"`), `r${i}`).toBe(1);
    expect(fresh).toHaveLength(N2 - N + 5);
    expect(fs.statSync(log()).mode & 0o777).toBe(0o600);
  }, 120_000);

  it('a SIGHUP sent to the watcher process itself reopens its own descriptor (and only its own)', async () => {
    // The watcher's PID: the one process running watcher-main.js for this test's decision log that is not the
    // standby (`--standby-of`, which holds the same group and reads nothing until the active one dies).
    const watchers = fs
      .readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .filter((p) => {
        try {
          const argv = fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
          return (
            argv.some((a) => a.endsWith('watcher-main.js')) && argv.includes(log()) && !argv.includes('--standby-of')
          );
        } catch {
          return false;
        }
      });
    expect(watchers).toHaveLength(1);
    fs.renameSync(log(), `${log()}.w`);
    process.kill(Number(watchers[0]), 'SIGHUP');
    await new Promise((r) => setTimeout(r, 300));
    expect(await openAs(N2, N3, 0)).toEqual({ EPERM: N3 - N2 });
    expect(await tlsAs(30, 33)).toEqual(Array(3).fill('ECONNRESET'));
    await new Promise((r) => setTimeout(r, 500));
    const fresh = read(log());
    const renamed = read(`${log()}.w`);
    for (let i = N2; i < N3; i++) expect(count(fresh, 'filesystem', `/no/f${i}"`), `f${i}`).toBe(1);
    // The service was not signalled: its lines still go to the file it holds, now renamed.
    for (let i = 30; i < 33; i++) expect(count(renamed, 'network', `"r${i}.evil.lab"`), `r${i}`).toBe(1);
    expect(fresh.filter((l) => l.surface === 'network')).toEqual([]);
    // The service stays up: nothing about the watcher's SIGHUP reached it.
    expect(svc!.exitCode).toBeNull();
  }, 120_000);
});
