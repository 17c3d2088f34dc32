import fs from 'node:fs';
import path from 'node:path';

/** Where argv[0] points. `path` is what PATH lookup (or the given path) found; `real` its realpath. */
export interface ResolvedBinary {
  path: string | null;
  real: string | null;
  /** Why nothing was found, for EXEC_ERROR. */
  error: string | null;
}

/** The child's PATH when the operator gives none: system directories only, never the jail. */
export const DEFAULT_PATH = '/usr/local/bin:/usr/bin:/bin';

function executableFile(p: string): boolean {
  try {
    const st = fs.statSync(p);
    if (!st.isFile()) return false;
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function real(p: string): string | null {
  try {
    return fs.realpathSync(p);
  } catch {
    return null;
  }
}

/**
 * Resolves argv[0] to an absolute path BEFORE the policy check, so the check sees what will run:
 * a bare name is looked up on `searchPath` (relative PATH entries are skipped: they would depend on
 * the cwd, which the model chooses); a name with `/` is taken relative to `cwd`.
 */
export function resolveBinary(name: string, opts: { searchPath: string; cwd: string }): ResolvedBinary {
  if (name.includes('/')) {
    const p = path.resolve(opts.cwd, name);
    if (!executableFile(p)) return { path: p, real: real(p), error: `'${name}' is not an executable file` };
    return { path: p, real: real(p), error: null };
  }
  for (const dir of opts.searchPath.split(':')) {
    if (!dir.startsWith('/')) continue;
    const p = path.join(dir, name);
    if (executableFile(p)) return { path: p, real: real(p), error: null };
  }
  return { path: null, real: null, error: `'${name}' not found on PATH` };
}

/** The absolute directories of `searchPath`, each with its real path too (`/bin` and `/usr/bin`). */
export function pathDirs(searchPath: string): string[] {
  const out = new Set<string>();
  for (const dir of searchPath.split(':')) {
    if (!dir.startsWith('/')) continue;
    const lexical = path.posix.normalize(dir).replace(/(.)\/$/, '$1');
    out.add(lexical);
    const r = real(lexical);
    if (r !== null) out.add(r);
  }
  return [...out];
}
