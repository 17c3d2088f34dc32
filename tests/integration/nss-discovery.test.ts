/**
 * Subjects come from NSS, not from /etc/passwd alone: an agent account that exists only in another NSS source (here
 * libnss-extrausers, standing in for LDAP or sssd) is discovered and confined by the service. The host is not
 * touched: the service runs in a private mount namespace (`unshare -m`) where a modified nsswitch.conf
 * (`passwd: files extrausers`) and a test directory holding the extrausers passwd are bind-mounted over
 * /etc/nsswitch.conf and /var/lib/extrausers; both go away with the namespace. The account is then judged from the
 * attacker's side: it opens files on a tmpfs this test mounts, as its own UID.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nativeAvailable } from '../../src/native.js';
import { stopChild, waitForServiceReady } from '../lab/index.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');
const isRoot = process.getuid?.() === 0;
const EXTRAUSERS_LIB = ['/usr/lib/libnss_extrausers.so.2', '/lib/x86_64-linux-gnu/libnss_extrausers.so.2'];

function run(argv: string[]): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8' });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

/** A UID (and the same-numbered GID) that no NSS source of the host knows. */
function freeId(from: number): number {
  for (let id = from; id < from + 1000; id++) {
    if (run(['getent', 'passwd', String(id)]).code === 2 && run(['getent', 'group', String(id)]).code === 2) return id;
  }
  throw new Error('no free UID');
}

describe.skipIf(!isRoot || !nativeAvailable())('subjects from NSS (root, private mount namespace, tmpfs)', () => {
  const cleanups: (() => unknown)[] = [];
  let dir = '';
  let mnt = '';
  let uid = 0;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  const name = 'leash-tnss1';

  const openAs = (id: number, file: string) => {
    const r = run(['setpriv', `--reuid=${id}`, `--regid=${id}`, '--clear-groups', 'timeout', '10', '/bin/cat', file]);
    return r.code === 0 ? 'ok' : /Operation not permitted/.test(r.err) ? 'EPERM' : `fail ${r.code} ${r.err.trim()}`;
  };

  beforeAll(async () => {
    // Root runs the suite: a missing NSS module is a failure that names it (scripts/install-deps.sh installs it).
    expect(
      EXTRAUSERS_LIB.some((p) => fs.existsSync(p)),
      'libnss-extrausers is not installed (scripts/install-deps.sh installs it)',
    ).toBe(true);
    expect(fs.statSync('/var/lib/extrausers').isDirectory(), '/var/lib/extrausers (libnss-extrausers)').toBe(true);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-nss-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    fs.chmodSync(dir, 0o755);
    mnt = path.join(dir, 'fs');
    fs.mkdirSync(mnt);
    const m = run(['mount', '-t', 'tmpfs', '-o', 'size=4m,mode=0755', 'leash-test', mnt]);
    if (m.code !== 0) throw new Error(m.err);
    cleanups.push(() => run(['umount', '-l', mnt]));
    for (const d of ['ok', 'no']) {
      fs.mkdirSync(path.join(mnt, d), { mode: 0o755 });
      fs.writeFileSync(path.join(mnt, d, 'f'), `${d}\n`, { mode: 0o644 });
    }

    uid = freeId(62000);
    const extra = path.join(dir, 'extrausers');
    fs.mkdirSync(extra, { mode: 0o755 });
    fs.writeFileSync(path.join(extra, 'passwd'), `${name}:x:${uid}:${uid}::/nonexistent:/usr/sbin/nologin\n`, {
      mode: 0o644,
    });
    fs.writeFileSync(path.join(extra, 'group'), `${name}:x:${uid}:\n`, { mode: 0o644 });
    const nss = path.join(dir, 'nsswitch.conf');
    const hostNss = fs.readFileSync('/etc/nsswitch.conf', 'utf8');
    expect(hostNss).toMatch(/^passwd:/m);
    fs.writeFileSync(nss, hostNss.replace(/^passwd:.*$/m, 'passwd: files extrausers'), { mode: 0o644 });
    // The host's own NSS does not know the account: only the service's namespace does.
    expect(run(['getent', 'passwd', name]).code).toBe(2);

    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
enforcers: { network: false, filesystem: true, tools: false }
network: { mode: whitelist, allow: [], deny: [] }
filesystem: { mode: whitelist, allow: [${mnt}/ok], deny: [] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [], deny: [] }
logging: { level: info, decisions: ${path.join(dir, 'decisions.jsonl')} }
`,
    );
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_WATCHER_TIMEOUT_S: '120',
    };
    delete env.LEASH_PASSWD; // the default: NSS
    svc = spawn(
      'unshare',
      [
        '-m',
        '--propagation',
        'private',
        '--',
        'sh',
        '-c',
        'mount --bind "$1" /etc/nsswitch.conf && mount --bind "$2" /var/lib/extrausers && exec timeout -s KILL 120 "$3" "$4" -c "$5"',
        'sh',
        nss,
        extra,
        process.execPath,
        CLI,
        path.join(dir, 'leash.yaml'),
      ],
      { env, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    cleanups.push(() => stopChild(svc!, 10_000));
    svc.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    await waitForServiceReady(svc, () => svcErr);
  }, 60_000);

  afterAll(async () => {
    let stopped: number | null = null;
    if (svc && svc.exitCode === null) stopped = await stopChild(svc, 10_000);
    for (const c of cleanups.reverse()) {
      try {
        await c();
      } catch {
        /* the rest still runs */
      }
    }
    if (stopped !== null) expect(stopped, svcErr.slice(-3000)).toBe(0);
  }, 30_000);

  it('discovers a leash-* account that only an extrausers NSS source knows, and confines it', async () => {
    expect(openAs(uid, `${mnt}/no/f`)).toBe('EPERM');
    expect(openAs(uid, `${mnt}/ok/f`)).toBe('ok');
    // A UID no source knows is nobody's subject: the same open is let through.
    expect(openAs(freeId(uid + 1), `${mnt}/no/f`)).toBe('ok');
    await new Promise((r) => setTimeout(r, 300));
    const lines = fs
      .readFileSync(path.join(dir, 'decisions.jsonl'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { uid: number; surface: string; action: string; subject: { path?: string } });
    expect(lines.some((l) => l.uid === uid && l.action === 'block' && l.subject.path === `${mnt}/no/f`)).toBe(true);
    // The host's NSS still does not know it: nothing of the test leaked out of its namespace.
    expect(run(['getent', 'passwd', name]).code).toBe(2);
    expect(fs.readFileSync('/etc/nsswitch.conf', 'utf8')).not.toMatch(/extrausers/);
  });
});
