// The system's dynamic loaders: the default of commands.interpreters. Found once, when the
// watcher (or `leash status`, `leash validate`) first asks, from the standard paths.
import fs from 'node:fs';
import path from 'node:path';

/** Directories where a distribution installs its ELF interpreters (glibc, musl; 64- and 32-bit). */
const LOADER_DIRS = ['/lib64', '/lib', '/lib32', '/libx32', '/usr/lib64', '/usr/lib', '/usr/lib32'];
const LOADER_RE = /^(ld-linux.*\.so\.\d+|ld64\.so\.\d+|ld\.so\.\d+|ld-musl-.*\.so\.1)$/;

/**
 * The real paths of the dynamic loaders found in the standard directories and their multiarch
 * subdirectories (`/lib/x86_64-linux-gnu`). The kernel reports an exec by the file's real path,
 * so symlinks (`/lib64/ld-linux-x86-64.so.2`) are resolved.
 */
export function findSystemLoaders(root = '/'): string[] {
  const out = new Set<string>();
  const scan = (dir: string, depth: number): void => {
    let names: fs.Dirent[];
    try {
      names = fs.readdirSync(path.join(root, dir), { withFileTypes: true });
    } catch {
      return;
    }
    for (const d of names) {
      const p = path.join(dir, d.name);
      if (LOADER_RE.test(d.name)) {
        try {
          const real = fs.realpathSync(path.join(root, p));
          if (fs.statSync(real).isFile()) out.add(root === '/' ? real : '/' + path.relative(root, real));
        } catch {
          /* a dangling link names no loader */
        }
      } else if (depth === 0 && d.isDirectory() && /-linux-/.test(d.name)) {
        scan(p, 1);
      }
    }
  };
  for (const d of LOADER_DIRS) scan(d, 0);
  return [...out].sort();
}

let cached: string[] | null = null;

/** findSystemLoaders() of this host, found once per process. */
export function systemLoaders(): string[] {
  cached ??= findSystemLoaders();
  return cached;
}
