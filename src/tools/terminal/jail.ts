import fs from 'node:fs';
import path from 'node:path';

/** True when `p` is `root` or lies below it (both real, absolute paths). Never `/jail` vs `/jailbreak`. */
export function isInside(root: string, p: string): boolean {
  if (p === root) return true;
  const prefix = root.endsWith('/') ? root : root + '/';
  return p.startsWith(prefix);
}

/** Validates the jail root at start-up: it must exist and be a directory. Returns its real path. */
export function openJail(dir: string): string {
  if (!dir) throw new Error('a jail root is required (--jail DIR)');
  let realRoot: string;
  try {
    realRoot = fs.realpathSync(dir);
  } catch {
    throw new Error(`jail root ${dir} does not exist`);
  }
  if (!fs.statSync(realRoot).isDirectory()) throw new Error(`jail root ${dir} is not a directory`);
  return realRoot;
}

/**
 * Where a file would really live, following symlinks of the parts that exist. Used to refuse an
 * audit or decision log inside the jail: the jailed commands could otherwise rewrite the record of
 * what they did.
 */
export function realLocation(file: string): string {
  const abs = path.resolve(file);
  try {
    return fs.realpathSync(abs);
  } catch {
    const parent = path.dirname(abs);
    if (parent === abs) return abs;
    return path.join(realLocation(parent), path.basename(abs));
  }
}

export type CwdResult = { ok: true; dir: string } | { ok: false; reason: string };

/**
 * Resolves the requested cwd (relative to the jail root when not absolute) with every symlink
 * followed, and accepts it only when the real directory is inside the jail root.
 */
export function resolveCwd(jail: string, cwd: string | undefined | null): CwdResult {
  if (cwd === undefined || cwd === null || cwd === '') return { ok: true, dir: jail };
  if (cwd.includes('\0')) return { ok: false, reason: 'cwd contains a NUL byte' };
  const wanted = path.resolve(jail, cwd);
  let realDir: string;
  try {
    realDir = fs.realpathSync(wanted);
  } catch {
    return { ok: false, reason: `cwd does not resolve inside the jail root: '${cwd}'` };
  }
  if (!isInside(jail, realDir)) return { ok: false, reason: `cwd escapes jail root: '${cwd}'` };
  try {
    if (!fs.statSync(realDir).isDirectory()) return { ok: false, reason: `cwd is not a directory: '${cwd}'` };
  } catch {
    return { ok: false, reason: `cwd does not resolve inside the jail root: '${cwd}'` };
  }
  return { ok: true, dir: realDir };
}
