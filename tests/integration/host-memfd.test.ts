// host.memfd_noexec, from the leashed account's side. A memfd lies on no marked filesystem, so a commands whitelist
// never sees `memfd_create` + `fexecve` of a program it denies. The service's own code (src/control/daemon/host.ts, from
// the build) applies vm.memfd_noexec = 2 inside a PID namespace this test makes (`unshare --pid --fork
// --mount-proc`: the value is per PID namespace), never on the host; the test checks the host's value is untouched.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable, type NativeWatcher } from '../../src/native.js';
import { MEMFD_NOEXEC } from '../../src/control/daemon/host.js';
import { copyBinaries, createUser, isEperm, mountTmpfs, runAs, runCleanups, type Cleanup } from './helpers/fslab.js';

const root = process.getuid?.() === 0 && nativeAvailable();
const HOST_JS = path.resolve(import.meta.dirname, '../../dist/src/control/daemon/host.js');

function need(bin: string): void {
  try {
    execFileSync('which', [bin], { stdio: 'ignore' });
  } catch {
    throw new Error(`this test needs ${bin} on the host`);
  }
}

// memfd-exec MODE PROGRAM ARGS...: copies PROGRAM's bytes into a memfd (MODE exec: with MFD_EXEC) and fexecve()s
// it; prints the failing call and its errno name.
const HELPER = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif
int main(int c, char **v) {
  if (c < 3) return 2;
  int fd = memfd_create("payload", strcmp(v[1], "exec") == 0 ? MFD_EXEC : 0);
  if (fd < 0) { printf("memfd_create %s\\n", strerrorname_np(errno)); return 1; }
  int in = open(v[2], O_RDONLY);
  if (in < 0) { printf("open %s\\n", strerrorname_np(errno)); return 1; }
  char buf[65536]; ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0) if (write(fd, buf, n) != n) { printf("write %s\\n", strerrorname_np(errno)); return 1; }
  close(in);
  fflush(stdout);
  fexecve(fd, v + 2, (char *[]){0});
  printf("fexecve %s\\n", strerrorname_np(errno));
  return 1;
}
`;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}
interface InNs {
  pidns: string;
  before: number | null;
  during: number | null;
  memfd: Run;
  memfdExec: Run;
  lowered: Run;
  problems: string[];
  after: number | null;
}

describe.skipIf(!root)('host.memfd_noexec: a memfd exec by the leashed account', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let helper = '';
  let payload = '';
  let user: { name: string; uid: number; gid: number };
  let w: NativeWatcher;

  beforeEach(() => {
    for (const b of ['cc', 'unshare', 'setpriv']) need(b);
    if (!fs.existsSync(HOST_JS)) throw new Error(`${HOST_JS} is missing: run npm run build`);
    dir = mountTmpfs(cleanups);
    const src = path.join(dir, 'memfd-exec.c');
    fs.writeFileSync(src, HELPER);
    fs.mkdirSync(path.join(dir, 'bin'), { mode: 0o755 });
    helper = path.join(dir, 'bin', 'memfd-exec');
    execFileSync('cc', ['-O2', '-o', helper, src]);
    payload = copyBinaries(path.join(dir, 'bin'), ['echo']).echo!;
    user = createUser(cleanups);
    // The whitelist the memfd exec walks around: the helper may run, the payload (echo) may not.
    w = new (loadNative().Watcher)({ onRecords: () => void w.drain(), watchdogMs: 0 });
    cleanups.push(() => w.close());
    const guard = setTimeout(() => w.close(), 60_000);
    cleanups.push(() => clearTimeout(guard));
    w.setSubjects([
      {
        uid: user.uid,
        failMode: 'closed',
        policy: {
          fail_mode: 'closed',
          filesystem: { mode: 'blacklist', allow: [], deny: [] },
          commands: { mode: 'whitelist', allow: [helper], deny: [] },
        },
      },
    ]);
    w.mark(dir);
    w.start();
  });
  afterEach(() => runCleanups(cleanups));

  /** In a PID namespace of its own: the service's applyHostSettings, the account's attempts, the restore. */
  function inPidNamespace(memfdNoexec: boolean): InNs {
    const as = ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups'];
    const script = `
      import { spawnSync } from 'node:child_process';
      import fs from 'node:fs';
      import { applyHostSettings, readMemfdNoexec } from ${JSON.stringify(pathToFileURL(HOST_JS).href)};
      const pidns = fs.readlinkSync('/proc/self/ns/pid');
      // Never the host's value: refuse to write from the host's PID namespace.
      if (pidns === process.env.HOST_PIDNS) { process.stdout.write('{"refused":"host pid namespace"}'); process.exit(3); }
      const run = (argv) => {
        const r = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8', timeout: 10000, killSignal: 'SIGKILL' });
        return { code: r.status, stdout: r.stdout, stderr: r.stderr };
      };
      const as = ${JSON.stringify(as)};
      const before = readMemfdNoexec();
      const host = applyHostSettings({ host: { memfd_noexec: ${memfdNoexec} } }, { stateFile: process.env.STATE });
      const during = readMemfdNoexec();
      const memfd = run([...as, ${JSON.stringify(helper)}, '0', ${JSON.stringify(payload)}, 'ran']);
      const memfdExec = run([...as, ${JSON.stringify(helper)}, 'exec', ${JSON.stringify(payload)}, 'ran']);
      // The account tries to lower it from a user + PID namespace of its own, then runs the memfd there.
      const lowered = run([...as, 'unshare', '-Urpf', '--mount-proc', 'sh', '-c',
        'echo 0 > /proc/sys/vm/memfd_noexec 2>/dev/null; cat /proc/sys/vm/memfd_noexec; ' +
        ${JSON.stringify(helper)} + ' 0 ' + ${JSON.stringify(payload)} + ' ran']);
      const problems = host.restore();
      const after = readMemfdNoexec();
      process.stdout.write(JSON.stringify({ pidns, before, during, memfd, memfdExec, lowered, problems, after }));
    `;
    const hostPidns = fs.readlinkSync('/proc/self/ns/pid');
    const r = spawnSync(
      'unshare',
      ['--pid', '--fork', '--mount-proc', '--kill-child', process.execPath, '--input-type=module', '-e', script],
      {
        encoding: 'utf8',
        timeout: 30_000,
        killSignal: 'SIGKILL',
        env: { ...process.env, HOST_PIDNS: hostPidns, STATE: path.join(dir, 'host-settings.json') },
      },
    );
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as InNs;
    expect(out.pidns).not.toBe(hostPidns);
    return out;
  }

  it('without the setting: the whitelist refuses the program (EPERM) but its bytes run from a memfd', () => {
    const hostValue = fs.readFileSync(MEMFD_NOEXEC, 'utf8');
    expect(isEperm(runAs(user, [payload, 'ran']))).toBe(true);
    const ns = inPidNamespace(false);
    expect(ns.during).toBe(ns.before);
    expect(ns.memfd).toMatchObject({ code: 0, stdout: 'ran\n' });
    expect(ns.memfdExec).toMatchObject({ code: 0, stdout: 'ran\n' });
    expect(fs.readFileSync(MEMFD_NOEXEC, 'utf8')).toBe(hostValue);
  });

  it('with host.memfd_noexec applied in its PID namespace: fexecve of a memfd is EACCES, MFD_EXEC is refused, the account cannot lower it, and stop restores the value', () => {
    const hostValue = fs.readFileSync(MEMFD_NOEXEC, 'utf8');
    const ns = inPidNamespace(true);
    expect(ns.before).toBe(Number(hostValue.trim()));
    expect(ns.during).toBe(2);
    // memfd_create without flags gets MFD_NOEXEC_SEAL: the exec itself is refused.
    expect(ns.memfd).toMatchObject({ code: 1, stdout: 'fexecve EACCES\n' });
    // Asking for an executable memfd is refused at creation.
    expect(ns.memfdExec).toMatchObject({ code: 1, stdout: 'memfd_create EACCES\n' });
    // A child namespace cannot go below its parent's value: the account's own namespace still reads 2.
    expect(ns.lowered.stdout).toBe('2\nfexecve EACCES\n');
    expect(ns.problems).toEqual([]);
    expect(ns.after).toBe(ns.before);
    expect(fs.existsSync(path.join(dir, 'host-settings.json'))).toBe(false);
    // The host's own value was never touched.
    expect(fs.readFileSync(MEMFD_NOEXEC, 'utf8')).toBe(hostValue);
  });
});
