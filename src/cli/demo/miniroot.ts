/**
 * A small root of its own on a marked tmpfs: the host's programs, their shared libraries and the real dynamic
 * loader, copied at their host paths (symlinks such as `/lib64 -> usr/lib64` recreated), so that a program, its
 * ELF interpreter and its libraries all lie on the marked filesystem, as on a host whose root filesystem is
 * marked. Used by the watcher's integration tests and by `leash demo` (its commands-whitelist step).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Copies one host path into a small root of its own, keeping the host's layout: every symlink
 * met on the way (`/bin -> usr/bin`, `/lib64/ld-linux-x86-64.so.2 -> /lib/...`) is recreated
 * inside `root`, and the file at the end is copied.
 */
export function copyIntoRoot(root: string, hostPath: string): void {
  const parts = path.resolve(hostPath).split('/').filter(Boolean);
  let host = '/';
  for (let i = 0; i < parts.length; i++) {
    host = path.join(host, parts[i]!);
    const inRoot = path.join(root, host);
    const st = fs.lstatSync(host);
    if (st.isSymbolicLink()) {
      const target = fs.readlinkSync(host);
      if (!fs.existsSync(inRoot) && !isLink(inRoot)) {
        fs.mkdirSync(path.dirname(inRoot), { recursive: true, mode: 0o755 });
        fs.symlinkSync(target, inRoot);
      }
      // Follow the link on the host and copy what it names too, then the rest of the path.
      const rest = parts.slice(i + 1).join('/');
      const next = path.resolve(path.dirname(host), target);
      copyIntoRoot(root, rest ? path.join(next, rest) : next);
      return;
    }
    if (i === parts.length - 1) {
      fs.mkdirSync(path.dirname(inRoot), { recursive: true, mode: 0o755 });
      if (!fs.existsSync(inRoot)) {
        fs.copyFileSync(host, inRoot);
        fs.chmodSync(inRoot, st.mode & 0o7777);
      }
    }
  }
}

function isLink(p: string): boolean {
  try {
    return fs.lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/** The files a dynamic program needs at start on this host, as ldd lists them (loader included). */
export function lddFiles(program: string): string[] {
  let out: string;
  try {
    out = execFileSync('ldd', [program], { encoding: 'utf8' });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new Error('ldd not found (apt-get install -y libc-bin)');
    throw e;
  }
  const files: string[] = [];
  for (const line of out.split('\n')) {
    const m = /=>\s+(\/\S+)/.exec(line) ?? /^\s+(\/\S+)\s+\(/.exec(line);
    if (m) files.push(m[1]!);
  }
  return files;
}

/** Copies into `root`, at their host paths, the files `program` (a host path) needs at start: loader and libraries. */
export function copyStartFiles(root: string, program: string): void {
  for (const f of lddFiles(fs.realpathSync(program))) copyIntoRoot(root, f);
}

/**
 * A small root of its own in `root` (on the test's marked tmpfs): the host's programs named, their
 * libraries and the real dynamic loader, all at their host paths. Returns each program's path in it.
 */
export function buildMiniRoot(root: string, programs: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of programs) {
    const host = p.startsWith('/') ? p : execFileSync('which', [p], { encoding: 'utf8' }).trim();
    copyIntoRoot(root, host);
    copyStartFiles(root, host);
    out[path.basename(host)] = host;
  }
  for (const d of ['tmp', 'work']) fs.mkdirSync(path.join(root, d), { recursive: true, mode: 0o1777 });
  return out;
}

/** Resolves `p` inside `root` as the kernel does for a process chrooted there; returns the host path. */
export function resolveInRoot(root: string, p: string): string {
  const todo = p.split('/').filter(Boolean);
  const done: string[] = [];
  for (let hops = 0; todo.length;) {
    const part = todo.shift()!;
    if (part === '.') continue;
    if (part === '..') {
      done.pop();
      continue;
    }
    const host = path.join(root, ...done, part);
    if (isLink(host)) {
      if (++hops > 40) throw new Error(`too many links resolving ${p}`);
      const t = fs.readlinkSync(host);
      if (t.startsWith('/')) done.length = 0;
      todo.unshift(...t.split('/').filter(Boolean));
      continue;
    }
    done.push(part);
  }
  return path.join(root, ...done);
}
