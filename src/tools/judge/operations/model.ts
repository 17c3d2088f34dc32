/**
 * The gate's model of the server behind it: where a relative path lands, learned from what the gate
 * sees (the server's command line, its working directory, the roots the client gives it, its own
 * `list_allowed_directories` answer). A mapping table says which reading its server uses
 * (`relative`): against its allowed directories (server-filesystem), its working directory (git), or
 * the directory an option of its command line names (leash terminal's --jail). What the model cannot
 * know gives no base, and the call is `unknown`.
 *
 * Every answer is a lookup in state kept up to date as messages pass: no filesystem access per call
 * (the walk of the resolved path is paths.ts's, remembered as before).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MappingTable } from './mappings.js';

/** How a table's server reads a relative path (mappings.ts `relative`). */
export type RelativeBase =
  { from: 'allowed_dirs'; tool?: string } | { from: 'cwd' } | { from: 'option'; option: string };

/** What the model knows, as it travels to the service with each judge request. */
export interface ModelSnapshot {
  /** Candidate lists of allowed directories, oldest first; null: a list the model cannot know. */
  lists: (string[] | null)[];
  /** The server's working directory, or null. */
  cwd: string | null;
  argv: string[];
}

/** Lists of allowed directories kept at most: past it, the oldest is known no longer. */
const MAX_LISTS = 8;

/** path-validation.js's test: `p` is `dir` or lies below it (both absolute, lexically normalised). */
function within(p: string, dir: string): boolean {
  if (p === dir) return true;
  if (dir === '/') return p.startsWith('/');
  return p.startsWith(`${dir}/`);
}

const sameList = (a: string[] | null, b: string[] | null) =>
  a !== null && b !== null && a.length === b.length && a.every((x, i) => x === b[i]);

export class ServerModel {
  /** Candidate allowed-directory lists, oldest first (the server moves forward through them). */
  lists: (string[] | null)[] = [];
  /** Moved by every roots answer relayed: a list_allowed_directories answer confirms only its own epoch. */
  epoch = 0;
  private argvListDone = false;
  private cwdKnown: string | null;

  constructor(
    readonly argv: string[],
    cwd: string | null,
    /** Reads the server's working directory now (/proc/PID/cwd), or null. */
    private readonly readCwd: () => string | null = () => null,
    private readonly home: string = os.homedir(),
  ) {
    this.cwdKnown = cwd;
  }

  static fromSnapshot(s: ModelSnapshot): ServerModel {
    const m = new ServerModel(s.argv, s.cwd);
    m.lists = s.lists.map((l) => (l === null ? null : [...l]));
    m.argvListDone = true;
    return m;
  }

  /** A server whose every base is `dir` (policy test and explain: no server runs, the workspace stands in). */
  static rootedAt(dir: string): ServerModel {
    const m = ServerModel.fromSnapshot({ lists: [[dir]], cwd: dir, argv: [] });
    m.fixed = dir;
    return m;
  }

  private fixed: string | null = null;

  snapshot(): ModelSnapshot {
    this.ensureArgvList();
    return { lists: this.lists, cwd: this.cwd(), argv: this.argv };
  }

  /** The server's working directory: read from the kernel when it can be, else the one it was started in. */
  cwd(): string | null {
    const c = this.readCwd();
    if (c !== null) this.cwdKnown = c;
    return this.cwdKnown;
  }

  /**
   * server-filesystem's directories from its command line: every argument after the one that names
   * the package or its script, made absolute against its working directory, with its real path
   * beside it when they differ, kept when it is a directory (what its start-up does). A command line
   * the model does not recognise gives an unknown list.
   */
  private ensureArgvList(): void {
    if (this.argvListDone) return;
    this.argvListDone = true;
    const i = this.argv.findIndex((a) =>
      /(^|\/)(@modelcontextprotocol\/server-filesystem(@[^/\s]+)?|mcp-server-filesystem|server-filesystem\/dist\/index\.js)$/.test(
        a,
      ),
    );
    if (i < 0) {
      this.lists.unshift(null);
      return;
    }
    const cwd = this.cwd();
    const dirs: string[] = [];
    for (const d of this.argv.slice(i + 1)) {
      const ex = d === '~' || d.startsWith('~/') ? path.join(this.home, d.slice(1)) : d;
      if (!ex.startsWith('/') && cwd === null) {
        this.lists.unshift(null);
        return;
      }
      const abs = path.resolve(cwd ?? '/', ex);
      for (const x of withReal(abs)) if (isDir(x) && !dirs.includes(x)) dirs.push(x);
    }
    // No directory: the server refuses every path until the client's roots arrive.
    this.lists.unshift(dirs.length > 0 ? dirs : null);
  }

  /**
   * The client's answer to the server's roots/list, taken before it is relayed: what the server's
   * roots handling will make of it (file URIs, `~`, real paths, directories only). An empty result
   * leaves the server as it was.
   */
  clientRoots(roots: unknown): void {
    this.ensureArgvList();
    if (!Array.isArray(roots)) return;
    const cwd = this.cwd() ?? '/';
    const dirs: string[] = [];
    for (const r of roots) {
      const uri = r !== null && typeof r === 'object' ? (r as { uri?: unknown }).uri : undefined;
      if (typeof uri !== 'string') continue;
      let p: string;
      try {
        p = uri.startsWith('file://') ? fileURLToPath(uri) : uri;
      } catch {
        continue;
      }
      if (p === '~' || p.startsWith('~/')) p = path.join(this.home, p.slice(1));
      let real: string;
      try {
        real = fs.realpathSync.native(path.resolve(cwd, p));
      } catch {
        continue;
      }
      if (isDir(real)) dirs.push(real);
    }
    if (dirs.length === 0) return;
    this.epoch++;
    if (sameList(this.lists[this.lists.length - 1] ?? null, dirs)) return;
    this.lists.push(dirs);
    // Too many lists in flight: the oldest is forgotten, and with it what the model can say for sure.
    if (this.lists.length > MAX_LISTS) this.lists.splice(0, this.lists.length - MAX_LISTS + 1, null);
  }

  /**
   * The server's own list (list_allowed_directories), for a request sent at `epoch`. The server
   * moves forward through the lists, so the one it names makes every older one past; one the model
   * did not have replaces what it could not know.
   */
  serverDirs(text: string, epoch: number): void {
    this.ensureArgvList();
    const lines = text.split('\n');
    if (lines[0] !== 'Allowed directories:') return;
    const dirs = lines.slice(1).filter((l) => l.startsWith('/'));
    if (dirs.length === 0) return;
    const k = this.lists.findIndex((l) => sameList(l, dirs));
    if (k >= 0) {
      this.lists.splice(0, k);
      return;
    }
    if (epoch !== this.epoch) return;
    const unknown = this.lists.findIndex((l) => l === null);
    if (unknown >= 0) this.lists[unknown] = dirs;
    else this.lists.push(dirs);
  }

  /**
   * The path joined to each base the server may use now (one per list of allowed directories in
   * flight), not yet resolved: the walk gives it its readings (`..` lexically and as the kernel
   * takes it). Null when the model cannot know a base.
   */
  resolveRelative(table: MappingTable, p: string): string[] | null {
    const how = table.relative;
    if (how === undefined) return null;
    if (how.from === 'cwd') {
      const c = this.cwd();
      return c === null ? null : [`${c}/${p}`];
    }
    if (how.from === 'option') {
      const dir = this.optionValue(how.option);
      return dir === null ? null : [`${dir}/${p}`];
    }
    this.ensureArgvList();
    if (this.lists.length === 0) return null;
    const out: string[] = [];
    for (const dirs of this.lists) {
      if (dirs === null) return null;
      const r = `${firstAllowed(dirs, p)}/${p}`;
      if (!out.includes(r)) out.push(r);
    }
    return out;
  }

  /** An option's directory (`--jail DIR`, `--jail=DIR`) made absolute and real, or null. */
  private optionValue(opt: string): string | null {
    if (this.fixed !== null) return this.fixed;
    let v: string | undefined;
    for (let i = 0; i < this.argv.length; i++) {
      const a = this.argv[i]!;
      if (a === opt) v = this.argv[i + 1];
      else if (a.startsWith(`${opt}=`)) v = a.slice(opt.length + 1);
    }
    if (v === undefined || v === '') return null;
    const c = v.startsWith('/') ? '/' : this.cwd();
    if (c === null) return null;
    try {
      return fs.realpathSync.native(path.resolve(c, v));
    } catch {
      return null;
    }
  }
}

/** lib.js resolveRelativePathAgainstAllowedDirectories: the first directory the result stays in, else the first. */
function firstAllowed(dirs: string[], rel: string): string {
  for (const d of dirs) {
    const c = path.resolve(d, rel);
    if (dirs.some((x) => within(c, x))) return d;
  }
  return dirs[0]!;
}

function withReal(abs: string): string[] {
  try {
    const r = fs.realpathSync.native(abs);
    return r === abs ? [abs] : [abs, r];
  } catch {
    return [abs];
  }
}

function isDir(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** Reads a process's working directory from /proc, or null. */
export function procCwd(pid: number | undefined): () => string | null {
  return () => {
    if (pid === undefined) return null;
    try {
      return fs.readlinkSync(`/proc/${pid}/cwd`);
    } catch {
      return null;
    }
  };
}

/**
 * What makes the rules mean something other than they say (`leash doctor` and the gate's start say
 * it): a workspace of `/`, a workspace outside every directory the server serves (its relative paths
 * land elsewhere), a server whose directories are unknown (every relative path is refused).
 * `lists` is the model's (or the server's own answer, as one list).
 */
export function workspaceWarnings(
  workspace: string | null,
  table: MappingTable | null,
  lists: (string[] | null)[] | null,
): string[] {
  const out: string[] = [];
  if (workspace === '/')
    out.push('the workspace is / (a gate started from / without --workspace?): ${workspace} rules name no project');
  if (table?.relative?.from !== 'allowed_dirs') return out;
  const current = lists === null || lists.length === 0 ? null : lists[lists.length - 1]!;
  if (current === null)
    out.push(
      `the ${table.id} server's allowed directories are unknown (no directory on its command line the gate can read, no roots yet): every relative path is judged unknown and refused`,
    );
  else if (workspace !== null && workspace !== '/' && !current.some((d) => within(workspace, d)))
    out.push(
      `the workspace ${workspace} lies outside every directory the ${table.id} server serves (${current.join(', ')}): its relative paths land there, not in the workspace`,
    );
  return out;
}
