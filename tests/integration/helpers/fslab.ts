// The filesystem test lab: a tmpfs the test mounts itself, binaries copied onto it,
// leash-tw<N> accounts, and commands run as those accounts. Every creation registers
// its teardown at once (onTestFinished / the returned cleanup list).
import { execFileSync, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// The small root of its own (loader, libc, programs) lives in src/lab/miniroot.ts (leash demo uses it too).
export { buildMiniRoot, copyIntoRoot, lddFiles, resolveInRoot } from '../../../src/lab/miniroot.js';

export type Cleanup = () => void;

/** Runs cleanups in reverse order, continuing past failures. */
export function runCleanups(list: Cleanup[]): void {
  while (list.length) {
    const c = list.pop()!;
    try {
      c();
    } catch (e) {
      process.stderr.write(`cleanup failed: ${(e as Error).message}\n`);
    }
  }
}

/** Mounts a fresh tmpfs (mode 0755, suid allowed) on a mkdtemp directory. */
export function mountTmpfs(cleanups: Cleanup[], size = '64m', prefix = 'leash-tw-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  cleanups.push(() => fs.rmdirSync(dir));
  execFileSync('mount', ['-t', 'tmpfs', '-o', `mode=0755,size=${size}`, 'tmpfs', dir]);
  cleanups.push(() => {
    // lazy unmount: a straggler child holding a file must not leave the mount behind.
    execFileSync('umount', ['-l', dir]);
  });
  return dir;
}

let userSeq = 0;
/** Creates a system account <prefix><pid%10000><seq> (leash-tw… unless a test has its own) with no home; removed in teardown. */
export function createUser(cleanups: Cleanup[], prefix = 'leash-tw'): { name: string; uid: number; gid: number } {
  const name = `${prefix}${process.pid % 10000}${userSeq++}`;
  spawnSync('userdel', [name]); // a leftover from a crashed run
  execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', '--user-group', name]);
  cleanups.push(() => {
    execFileSync('userdel', [name]);
  });
  const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
  return { name, uid, gid };
}

/** Copies system binaries into dir (so exec events come from the marked tmpfs). */
export function copyBinaries(dir: string, names: string[]): Record<string, string> {
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  const out: Record<string, string> = {};
  for (const n of names) {
    const src = n.startsWith('/') ? n : execFileSync('which', [n], { encoding: 'utf8' }).trim();
    const dst = path.join(dir, path.basename(src));
    fs.copyFileSync(fs.realpathSync(src), dst);
    fs.chmodSync(dst, 0o755);
    out[path.basename(src)] = dst;
  }
  return out;
}

/**
 * Builds the setuid helper: a C program that opens argv[1] and prints "ok" or the
 * errno name. Installed root-owned, mode 4755.
 */
export function buildSetuidOpener(dir: string, name = 'suid-open'): string {
  const src = path.join(dir, `${name}.c`);
  fs.writeFileSync(
    src,
    `#define _GNU_SOURCE\n#include <errno.h>\n#include <fcntl.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n` +
      `int main(int c,char**v){if(c<2)return 2;int fd=open(v[1],O_RDONLY);` +
      `if(fd<0){printf("%s euid=%d ruid=%d\\n",strerrorname_np(errno),geteuid(),getuid());return 1;}` +
      `printf("ok euid=%d ruid=%d\\n",geteuid(),getuid());close(fd);return 0;}\n`,
  );
  const bin = path.join(dir, name);
  execFileSync('cc', ['-O2', '-o', bin, src]);
  fs.chownSync(bin, 0, 0);
  fs.chmodSync(bin, 0o4755);
  return bin;
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function result(r: SpawnSyncReturns<string>): RunResult {
  return { code: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

/** Runs argv as the account (setpriv: real+effective uid/gid, no supplementary groups). */
export function runAs(user: { uid: number; gid: number }, argv: string[], timeoutMs = 10_000): RunResult {
  return result(
    spawnSync('setpriv', [`--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', ...argv], {
      encoding: 'utf8',
      timeout: timeoutMs,
      killSignal: 'SIGKILL',
    }),
  );
}

/** Runs a shell script as the account inside a user + mount namespace the account makes itself. */
export function runAsInOwnNs(user: { uid: number; gid: number }, script: string, timeoutMs = 10_000): RunResult {
  return runAs(user, ['unshare', '-Urm', '--', 'sh', '-c', script], timeoutMs);
}

/** Runs argv as root (a non-subject). */
export function runRoot(argv: string[], timeoutMs = 10_000): RunResult {
  return result(spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', timeout: timeoutMs, killSignal: 'SIGKILL' }));
}

/** True when the account got EPERM (the shapes cat/ls/sh print it in). */
export function isEperm(r: RunResult): boolean {
  return r.code !== 0 && /Operation not permitted|EPERM/.test(r.stderr + r.stdout);
}

/** Runs argv inside `root` as the account (`chroot --userspec`): exec events come from the account. */
export function runAsIn(
  root: string,
  user: { uid: number; gid: number },
  argv: string[],
  timeoutMs = 10_000,
): RunResult {
  return result(
    spawnSync('chroot', [`--userspec=${user.uid}:${user.gid}`, '--groups=', root, ...argv], {
      encoding: 'utf8',
      timeout: timeoutMs,
      killSignal: 'SIGKILL',
      cwd: '/',
    }),
  );
}
