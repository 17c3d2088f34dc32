/**
 * What the root tests run, by program, with the Debian package that brings it (scripts/install-deps.sh installs
 * them all). A test that needs one calls `requireProgram`: when it is missing the test fails naming the program and
 * its package, never skips silently.
 */
import { spawnSync } from 'node:child_process';

export const PROGRAMS: Record<string, string> = {
  ip: 'iproute2',
  nft: 'nftables',
  iptables: 'iptables',
  'iptables-restore': 'iptables',
  setpriv: 'util-linux',
  unshare: 'util-linux',
  mount: 'mount',
  umount: 'mount',
  chroot: 'coreutils',
  timeout: 'coreutils',
  mkfifo: 'coreutils',
  useradd: 'passwd',
  userdel: 'passwd',
  sysctl: 'procps',
  openssl: 'openssl',
  python3: 'python3',
  cc: 'gcc',
  ldd: 'libc-bin',
  fakeroot: 'fakeroot',
  'dpkg-deb': 'dpkg',
  'systemd-analyze': 'systemd',
};

/** The programs of `names` (default: all) that are not on PATH, as `name (package)`. */
export function missingPrograms(names: string[] = Object.keys(PROGRAMS)): string[] {
  return names
    .filter((n) => spawnSync('sh', ['-c', `command -v ${n}`], { encoding: 'utf8' }).status !== 0)
    .map((n) => `${n} (Debian package ${PROGRAMS[n] ?? '?'})`);
}

/** Throws, naming what is missing, unless every program is on PATH. */
export function requireProgram(...names: string[]): void {
  const m = missingPrograms(names);
  if (m.length) throw new Error(`this test needs ${m.join(', ')}: run scripts/install-deps.sh`);
}
