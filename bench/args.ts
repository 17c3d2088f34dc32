// Small helpers several benches use, with no side effects at import (bench/common.ts installs exit handlers).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';

/** The number after `name` in the bench's arguments (`--reps 3`), else `dflt`. */
export function numberArg(name: string, dflt: number, args: readonly string[] = process.argv.slice(2)): number {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
}

/** Runs a program to its end: exit code, stdout, stderr. */
export function run(argv: string[], env: NodeJS.ProcessEnv = {}): { code: number; out: string; err: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  return { code: r.status ?? -1, out: r.stdout, err: r.stderr };
}

/**
 * `n` synthetic accounts `<prefix><i>` from `uidBase` on: refused if any UID is taken on this host (a stray process
 * of that UID would be redirected inside the bench's namespace only, but the figures should not depend on it).
 */
export function syntheticAccounts(prefix: string, uidBase: number, n: number): { name: string; uid: number }[] {
  const hostUids = new Set(
    fs
      .readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .map((l) => Number(l.split(':')[2])),
  );
  const accounts = Array.from({ length: n }, (_, i) => ({ name: `${prefix}${i}`, uid: uidBase + i }));
  for (const a of accounts) if (hostUids.has(a.uid)) throw new Error(`uid ${a.uid} exists in /etc/passwd`);
  return accounts;
}
