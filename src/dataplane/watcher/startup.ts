// What `leash validate` says about a commands whitelist on this host: can each allowed program
// start? Its exec, its interpreter's exec and every file the loader opens at start (the program,
// the interpreter, the shared libraries of the ELF dynamic section, resolved as the loader
// resolves them) must pass the policy, or the program fails with EPERM.
import fs from 'node:fs';
import path from 'node:path';
import { compilePolicy, decide } from '../../engine/decide.js';
import type { PolicyInput } from '../../engine/types.js';

/** What an ELF says about its start: PT_INTERP, DT_NEEDED, DT_RUNPATH/DT_RPATH. Null: not a 64/32-bit LE ELF. */
export interface ElfStart {
  interp: string | null;
  needed: string[];
  runpath: string[] | null;
  rpath: string[] | null;
  elf64: boolean;
}

/** Reads the start of an ELF file (headers, PT_INTERP, PT_DYNAMIC); a script gives its `#!` interpreter. */
export function readStart(file: string): ElfStart | null {
  const b = fs.readFileSync(file);
  if (b.length >= 2 && b[0] === 0x23 && b[1] === 0x21) {
    const m = /^#![ \t]*([^ \t\n\0]+)/.exec(b.subarray(0, 256).toString('latin1'));
    return { interp: m ? m[1]! : null, needed: [], runpath: null, rpath: null, elf64: true };
  }
  if (b.length < 52 || b.readUInt32BE(0) !== 0x7f454c46 || b[5] !== 1) return null;
  const e64 = b[4] === 2;
  const u = (o: number, w: 4 | 8): number => (w === 8 ? Number(b.readBigUInt64LE(o)) : b.readUInt32LE(o));
  const W = e64 ? 8 : 4;
  const phoff = u(e64 ? 32 : 28, W as 4 | 8);
  const phentsize = b.readUInt16LE(e64 ? 54 : 42);
  const phnum = b.readUInt16LE(e64 ? 56 : 44);
  let interp: string | null = null;
  const loads: { vaddr: number; off: number; filesz: number }[] = [];
  let dyn: { off: number; size: number } | null = null;
  for (let i = 0; i < phnum; i++) {
    const o = phoff + i * phentsize;
    if (o + phentsize > b.length) break;
    const type = b.readUInt32LE(o);
    const off = e64 ? u(o + 8, 8) : u(o + 4, 4);
    const vaddr = e64 ? u(o + 16, 8) : u(o + 8, 4);
    const filesz = e64 ? u(o + 32, 8) : u(o + 16, 4);
    if (type === 3 && interp === null)
      interp = b
        .subarray(off, off + filesz)
        .toString('latin1')
        .replace(/\0.*$/s, '');
    if (type === 1) loads.push({ vaddr, off, filesz });
    if (type === 2) dyn = { off, size: filesz };
  }
  const needed: number[] = [];
  let strtab = -1;
  let runpath = -1;
  let rpath = -1;
  if (dyn) {
    const ent = e64 ? 16 : 8;
    for (let o = dyn.off; o + ent <= dyn.off + dyn.size && o + ent <= b.length; o += ent) {
      const tag = e64 ? Number(b.readBigInt64LE(o)) : b.readInt32LE(o);
      const val = e64 ? u(o + 8, 8) : u(o + 4, 4);
      if (tag === 0) break;
      if (tag === 1) needed.push(val);
      else if (tag === 5) strtab = val;
      else if (tag === 29) runpath = val;
      else if (tag === 15) rpath = val;
    }
  }
  // DT_STRTAB is an address: map it to a file offset through the PT_LOAD that holds it.
  const seg = loads.find((l) => strtab >= l.vaddr && strtab < l.vaddr + l.filesz);
  const str = (off: number): string => {
    if (!seg || off < 0) return '';
    const start = seg.off + (strtab - seg.vaddr) + off;
    const end = b.indexOf(0, start);
    return b.subarray(start, end < 0 ? b.length : end).toString('latin1');
  };
  const list = (off: number): string[] | null => (off < 0 ? null : str(off).split(':').filter(Boolean));
  return { interp, needed: needed.map(str).filter(Boolean), runpath: list(runpath), rpath: list(rpath), elf64: e64 };
}

/** Library name -> path from /etc/ld.so.cache (the glibc-ld.so.cache1.1 format), for the given class. */
export function readLdCache(file = '/etc/ld.so.cache'): Map<string, string[]> {
  const out = new Map<string, string[]>();
  let b: Buffer;
  try {
    b = fs.readFileSync(file);
  } catch {
    return out;
  }
  const MAGIC = 'glibc-ld.so.cache1.1';
  const base = b.indexOf(MAGIC, 0, 'latin1');
  if (base < 0) return out;
  const n = b.readUInt32LE(base + 20);
  const cstr = (o: number): string => {
    const end = b.indexOf(0, o);
    return b.subarray(o, end < 0 ? b.length : end).toString('latin1');
  };
  for (let i = 0, o = base + 48; i < n && o + 24 <= b.length; i++, o += 24) {
    const key = cstr(b.readUInt32LE(o + 4));
    const value = cstr(b.readUInt32LE(o + 8));
    out.set(key, [...(out.get(key) ?? []), value]);
  }
  return out;
}

const DEFAULT_DIRS = ['/lib/x86_64-linux-gnu', '/usr/lib/x86_64-linux-gnu', '/lib64', '/usr/lib64', '/lib', '/usr/lib'];

function isElfOfClass(p: string, elf64: boolean): boolean {
  try {
    const fd = fs.openSync(p, 'r');
    const h = Buffer.alloc(5);
    fs.readSync(fd, h, 0, 5, 0);
    fs.closeSync(fd);
    return h.readUInt32BE(0) === 0x7f454c46 && (h[4] === 2) === elf64;
  } catch {
    return false;
  }
}

/** Resolves one DT_NEEDED name the way ld.so does: RPATH (without RUNPATH), RUNPATH, the cache, the default dirs. */
export function resolveNeeded(
  name: string,
  owner: string,
  start: ElfStart,
  cache: Map<string, string[]>,
): string | null {
  if (name.includes('/')) return fs.existsSync(name) ? name : null;
  const origin = path.dirname(owner);
  const expand = (d: string): string => d.replace(/\$(\{ORIGIN\}|ORIGIN)/g, origin);
  const dirs = [...(start.runpath ? [] : (start.rpath ?? [])), ...(start.runpath ?? [])].map(expand);
  for (const d of dirs) {
    const p = path.join(d, name);
    if (isElfOfClass(p, start.elf64)) return p;
  }
  for (const p of cache.get(name) ?? []) if (isElfOfClass(p, start.elf64)) return p;
  for (const d of DEFAULT_DIRS) {
    const p = path.join(d, name);
    if (isElfOfClass(p, start.elf64)) return p;
  }
  return null;
}

/** One program that cannot start under the policy: the file refused and the rule (null: the mode default). */
export interface StartProblem {
  program: string;
  file: string;
  surface: 'filesystem' | 'commands';
  reason: string;
  rule: string | null;
  message: string;
}

/**
 * For each absolute commands.allow entry that exists (whitelist mode): the exec of its interpreter
 * and every file its start opens (program, interpreter, shared libraries, transitively) under
 * `policy`. `interpreters` is the effective commands.interpreters. First problem per program.
 */
export function startProblems(policy: PolicyInput, interpreters: string[]): StartProblem[] {
  if (policy.commands.mode !== 'whitelist') return [];
  const compiled = compilePolicy({ ...policy, commands: { ...policy.commands, interpreters } });
  const cache = readLdCache();
  const out: StartProblem[] = [];
  for (const entry of policy.commands.allow) {
    if (typeof entry !== 'string' || !entry.startsWith('/')) continue;
    let program: string;
    try {
      program = fs.realpathSync(entry);
      if (!fs.statSync(program).isFile()) continue;
    } catch {
      continue;
    }
    const p = checkProgram(program, compiled, cache);
    if (p) out.push({ ...p, program: entry });
  }
  return out;
}

function checkProgram(
  program: string,
  compiled: ReturnType<typeof compilePolicy>,
  cache: Map<string, string[]>,
): Omit<StartProblem, 'program'> | null {
  const read = (file: string): Omit<StartProblem, 'program'> | null => {
    const v = decide('filesystem', { path: file }, compiled);
    if (v.action === 'allow') return null;
    return {
      file,
      surface: 'filesystem',
      reason: v.reason,
      rule: v.rule,
      message: `${program} cannot start: it opens ${file}, which the filesystem policy denies (${v.reason}${v.rule ? ` by "${v.rule}"` : ''})`,
    };
  };
  const seen = new Set<string>();
  const queue: string[] = [];
  let start: ElfStart | null;
  try {
    start = readStart(program);
  } catch {
    return null;
  }
  const first = read(program);
  if (first) return first;
  // A dynamic program's loader reads the cache of library paths first.
  if (start?.interp && start.needed.length > 0 && fs.existsSync('/etc/ld.so.cache')) {
    const c = read(fs.realpathSync('/etc/ld.so.cache'));
    if (c) return c;
  }
  let loader = program;
  // Follow the interpreter chain (#! then its ELF loader), as the kernel does.
  for (let depth = 0; start?.interp && depth < 4; depth++) {
    let interp: string;
    try {
      interp = fs.realpathSync(start.interp);
    } catch {
      return {
        file: start.interp,
        surface: 'commands',
        reason: 'not_found',
        rule: null,
        message: `${program} cannot start: its interpreter ${start.interp} does not exist`,
      };
    }
    const v = decide('commands', { binary: interp, interpreterOf: loader }, compiled);
    if (v.action !== 'allow') {
      return {
        file: interp,
        surface: 'commands',
        reason: v.reason,
        rule: v.rule,
        message: `${program} cannot start: its interpreter ${interp} is not allowed (${v.reason}${v.rule ? ` by "${v.rule}"` : ''}); add it to commands.interpreters or commands.allow`,
      };
    }
    const r = read(interp);
    if (r) return r;
    if (start.needed.length) queue.push(loader);
    loader = interp;
    try {
      start = readStart(interp);
    } catch {
      break;
    }
  }
  // Shared libraries: DT_NEEDED of the program (and of a #! interpreter), transitively.
  const elfs = [program, loader].filter((x, i, a) => a.indexOf(x) === i);
  for (const e of elfs) if (!queue.includes(e)) queue.push(e);
  while (queue.length) {
    const obj = queue.shift()!;
    if (seen.has(obj)) continue;
    seen.add(obj);
    let s: ElfStart | null;
    try {
      s = readStart(obj);
    } catch {
      continue;
    }
    if (!s || s.needed.length === 0) continue;
    for (const name of s.needed) {
      const lib = resolveNeeded(name, obj, s, cache);
      if (!lib) continue; // the loader would fail too, but that is not the policy's doing
      const real = fs.realpathSync(lib);
      const r = read(real);
      if (r) return r;
      queue.push(real);
    }
  }
  return null;
}
