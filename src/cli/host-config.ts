/**
 * The MCP host configurations `leash host init|list` reads and edits (docs/tools.md "Host set-up"):
 * where each host keeps its server list and in which format, which entries are already wrapped by
 * `leash mcp`, and the surgical edit that wraps one. An edit changes only the `command` and `args`
 * values of the entries it wraps: every other byte of the file — unrelated entries, comments,
 * key order, indentation — stays as it was, and the result is re-parsed and compared with what the
 * wrap should give before anything is written.
 */
import os from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { parse as parseToml } from 'smol-toml';
import { LeashError } from '../errors.js';

export type HostId = 'cursor' | 'claude-desktop' | 'claude-code' | 'codex';
export type HostFormat = 'json-mcpServers' | 'toml-mcp_servers';

export interface HostSpec {
  id: HostId;
  format: HostFormat;
  /** Candidate files, the user-scope one first (`~` is the home directory, a relative path the cwd). */
  files: string[];
  /** What the location and format were taken from, and when. */
  checked: string;
}

export const HOSTS: readonly HostSpec[] = [
  {
    id: 'cursor',
    format: 'json-mcpServers',
    files: ['~/.cursor/mcp.json', '.cursor/mcp.json'],
    checked:
      'JSON {"mcpServers": {NAME: {command, args, env} | {url}}}, global ~/.cursor/mcp.json, project .cursor/mcp.json — from the format as of 2026-12-02 (not re-read from Cursor\'s docs: no network here)',
  },
  {
    id: 'claude-desktop',
    format: 'json-mcpServers',
    files: ['~/.config/Claude/claude_desktop_config.json'],
    checked:
      'JSON {"mcpServers": {NAME: {command, args, env}}} in ~/.config/Claude/claude_desktop_config.json (macOS: ~/Library/Application Support/Claude/, Windows: %APPDATA%\\Claude\\; pass --file there) — from the format as of 2026-12-02',
  },
  {
    id: 'claude-code',
    format: 'json-mcpServers',
    files: ['~/.claude.json', '.mcp.json'],
    checked:
      'JSON {"mcpServers": {NAME: {type?, command, args, env} | {type: "http"|"sse", url}}}: user scope at the top of ~/.claude.json, local scope in its "projects"[DIR].mcpServers (listed as DIR:NAME), project scope in .mcp.json — from the format as of 2026-12-02',
  },
  {
    id: 'codex',
    format: 'toml-mcp_servers',
    files: ['~/.codex/config.toml'],
    checked:
      'TOML [mcp_servers.NAME] with command = "…", args = […], env = {…} in ~/.codex/config.toml ($CODEX_HOME/config.toml when set) — from the format as of 2026-12-02',
  },
];

export function hostSpec(id: string): HostSpec {
  const h = HOSTS.find((x) => x.id === id);
  if (h === undefined)
    throw new LeashError('usage', `no host ${JSON.stringify(id)} (one of: ${HOSTS.map((x) => x.id).join(', ')})`, {
      option: '--host',
    });
  return h;
}

/** The files a host may use here, absolute (CODEX_HOME honoured for codex). */
export function hostFiles(h: HostSpec, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): string[] {
  const home = env.HOME && env.HOME !== '' ? env.HOME : os.homedir();
  if (h.id === 'codex' && env.CODEX_HOME) return [path.join(env.CODEX_HOME, 'config.toml')];
  return h.files.map((f) => (f.startsWith('~/') ? path.join(home, f.slice(2)) : path.resolve(cwd, f)));
}

export type EntryState = 'wrapped' | 'unwrapped' | 'remote' | 'invalid';

export interface ServerEntry {
  /** As listed and as --server names it: the key, or DIR:key for a project-scoped entry of ~/.claude.json. */
  name: string;
  /** The entry's key in its table, and the keys leading to that table from the top of the document. */
  key: string;
  table: string[];
  /** The project directory of a project-scoped entry, else null. */
  scope: string | null;
  state: EntryState;
  command: string | null;
  args: string[];
}

export interface WrapOptions {
  /** The leash executable the wrapped entries run (default: leash, from PATH). */
  leash: string;
  /** `leash mcp --policy FILE` instead of asking the service. */
  policy?: string;
  /** A policy per server (by its listed name), over `policy`. */
  policies?: Record<string, string>;
  /** `leash mcp --approval tty|none`: who answers what a policy asks. */
  approval?: string;
  /** Only these servers (default: every unwrapped stdio server). */
  only?: string[];
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function entryState(v: unknown): ServerEntry['state'] {
  if (!isObj(v)) return 'invalid';
  if (typeof v.command !== 'string') return typeof v.url === 'string' ? 'remote' : 'invalid';
  if (v.args !== undefined && (!Array.isArray(v.args) || v.args.some((a) => typeof a !== 'string'))) return 'invalid';
  const args = (v.args as string[] | undefined) ?? [];
  if (path.basename(v.command) === 'leash' && args[0] === 'mcp') return 'wrapped';
  return 'unwrapped';
}

interface Table {
  path: string[];
  scope: string | null;
  servers: Obj;
}

function entries(tables: Table[]): ServerEntry[] {
  return tables.flatMap((t) => Object.entries(t.servers).map(([key, v]) => entry(t, key, v)));
}

function entry(t: Table, key: string, v: unknown): ServerEntry {
  return {
    name: t.scope === null ? key : `${t.scope}:${key}`,
    key,
    table: t.path,
    scope: t.scope,
    state: entryState(v),
    command: isObj(v) && typeof v.command === 'string' ? v.command : null,
    args: isObj(v) && Array.isArray(v.args) ? v.args.filter((a): a is string => typeof a === 'string') : [],
  };
}

/**
 * The parsed document and its server tables: the top one (an empty one when the file has none) and, in
 * JSON, each `projects[DIR].mcpServers` (Claude Code keeps its local-scope servers there in ~/.claude.json).
 */
function parseDoc(format: HostFormat, text: string, file: string): { doc: Obj; tables: Table[] } {
  let doc: unknown;
  try {
    doc = format === 'json-mcpServers' ? JSON.parse(text) : parseToml(text);
  } catch (e) {
    throw new LeashError('host_config_invalid', `${file} is not valid ${format.startsWith('json') ? 'JSON' : 'TOML'}`, {
      file,
      detail: e instanceof Error ? e.message.split('\n')[0] : String(e),
    });
  }
  if (!isObj(doc)) throw new LeashError('host_config_invalid', `${file}: the top level is not an object`, { file });
  const key = format === 'json-mcpServers' ? 'mcpServers' : 'mcp_servers';
  const servers = doc[key];
  const tables: Table[] = [];
  if (servers !== undefined) {
    if (!isObj(servers)) throw new LeashError('host_config_invalid', `${file}: ${key} is not an object`, { file });
    tables.push({ path: [key], scope: null, servers });
  }
  if (format === 'json-mcpServers' && isObj(doc.projects)) {
    for (const [dir, p] of Object.entries(doc.projects)) {
      if (!isObj(p) || p.mcpServers === undefined) continue;
      if (!isObj(p.mcpServers))
        throw new LeashError('host_config_invalid', `${file}: projects[${dir}].mcpServers is not an object`, { file });
      tables.push({ path: ['projects', dir, 'mcpServers'], scope: dir, servers: p.mcpServers });
    }
  }
  return { doc, tables };
}

export function listServers(format: HostFormat, text: string, file: string): ServerEntry[] {
  return entries(parseDoc(format, text, file).tables);
}

/** The args a wrapped entry runs: leash mcp with its policy and approver, then the server as it was. */
export function wrappedArgs(o: WrapOptions, e: Pick<ServerEntry, 'name' | 'command' | 'args'>): string[] {
  const policy = o.policies?.[e.name] ?? o.policy;
  return [
    'mcp',
    ...(policy !== undefined ? ['--policy', policy] : []),
    ...(policy !== undefined && o.approval !== undefined ? ['--approval', o.approval] : []),
    '--',
    e.command!,
    ...e.args,
  ];
}

/** The servers a wrap touches: the selected (or every) unwrapped stdio entry; a selected name that cannot be wrapped is an error. */
function targets(list: ServerEntry[], o: WrapOptions, file: string): ServerEntry[] {
  if (o.only === undefined) return list.filter((e) => e.state === 'unwrapped');
  return o.only.map((n) => {
    const e = list.find((x) => x.name === n);
    if (e === undefined)
      throw new LeashError('usage', `${file} has no server ${JSON.stringify(n)}`, { option: '--server' });
    if (e.state !== 'unwrapped')
      throw new LeashError('usage', `server ${JSON.stringify(n)} in ${file} is ${e.state}: nothing to wrap`, {
        option: '--server',
      });
    return e;
  });
}

// ---- JSON: a scanner that knows where each value starts and ends --------------------------------

interface Span {
  start: number;
  end: number;
}

function skipWs(s: string, i: number): number {
  while (i < s.length && (s[i] === ' ' || s[i] === '\t' || s[i] === '\n' || s[i] === '\r')) i++;
  return i;
}

function scanString(s: string, i: number): number {
  // s[i] === '"'; returns the index after the closing quote (the text is valid JSON: JSON.parse said so).
  for (let k = i + 1; k < s.length; k++) {
    if (s[k] === '\\') k++;
    else if (s[k] === '"') return k + 1;
  }
  return s.length;
}

/** The end of the JSON value starting at i. */
function scanValue(s: string, i: number): number {
  const c = s[i];
  if (c === '"') return scanString(s, i);
  if (c === '{' || c === '[') {
    const close = c === '{' ? '}' : ']';
    let k = skipWs(s, i + 1);
    if (s[k] === close) return k + 1;
    for (;;) {
      if (c === '{') {
        k = skipWs(s, scanString(s, k));
        k = skipWs(s, k + 1); // ':'
      }
      k = skipWs(s, scanValue(s, k));
      if (s[k] === ',') k = skipWs(s, k + 1);
      else return k + 1; // close
    }
  }
  let k = i;
  while (k < s.length && !/[\s,\]}]/.test(s[k]!)) k++;
  return k;
}

/** The members of the object at i: each key and the span of its value. */
function members(s: string, i: number): { key: string; value: Span }[] {
  const out: { key: string; value: Span }[] = [];
  let k = skipWs(s, i + 1);
  if (s[k] === '}') return out;
  for (;;) {
    const kEnd = scanString(s, k);
    const key = JSON.parse(s.slice(k, kEnd)) as string;
    const vStart = skipWs(s, skipWs(s, kEnd) + 1);
    const vEnd = scanValue(s, vStart);
    out.push({ key, value: { start: vStart, end: vEnd } });
    k = skipWs(s, vEnd);
    if (s[k] !== ',') return out;
    k = skipWs(s, k + 1);
  }
}

/** The last member of a key (JSON.parse keeps the last of duplicate keys). */
function member(s: string, at: number, key: string): Span | null {
  const m = members(s, at).filter((x) => x.key === key);
  return m.length ? m[m.length - 1]!.value : null;
}

const jsonArray = (a: string[]) => `[${a.map((x) => JSON.stringify(x)).join(', ')}]`;

interface Edit {
  start: number;
  end: number;
  text: string;
}

function applyEdits(text: string, edits: Edit[]): string {
  let out = text;
  for (const e of [...edits].sort((a, b) => b.start - a.start)) out = out.slice(0, e.start) + e.text + out.slice(e.end);
  return out;
}

function jsonEdits(text: string, wrap: ServerEntry[], o: WrapOptions): Edit[] {
  const edits: Edit[] = [];
  for (const e of wrap) {
    let at = skipWs(text, 0);
    for (const k of e.table) at = member(text, at, k)!.start;
    const entry = member(text, at, e.key)!;
    const cmd = member(text, entry.start, 'command')!;
    const args = member(text, entry.start, 'args');
    edits.push({ start: cmd.start, end: cmd.end, text: JSON.stringify(o.leash) });
    const a = jsonArray(wrappedArgs(o, e));
    if (args !== null) edits.push({ start: args.start, end: args.end, text: a });
    else edits.push({ start: cmd.end, end: cmd.end, text: `, "args": ${a}` });
  }
  return edits;
}

// ---- TOML: the [mcp_servers.NAME] tables, line by line --------------------------------------------

const bareKey = /^[A-Za-z0-9_-]+$/;

function tomlKey(name: string): string {
  return bareKey.test(name) ? name : JSON.stringify(name);
}

/** Does this header line open the table of server `name`? (bare, "quoted" or 'literal' key) */
function isHeaderOf(line: string, name: string): boolean {
  const m = /^\s*\[\s*mcp_servers\s*\.\s*(.+?)\s*\]\s*(#.*)?$/.exec(line);
  if (m === null || line.trim().startsWith('[[')) return false;
  const k = m[1]!;
  if (bareKey.test(k)) return k === name;
  try {
    const v = (parseToml(`x = ${k}`) as { x: unknown }).x;
    return v === name;
  } catch {
    return false;
  }
}

/** The line range [from, to) of one `key = value` in lines[start..end), the value possibly spanning lines. */
function tomlKeyLines(lines: string[], start: number, end: number, key: string): { from: number; to: number } | null {
  const re = new RegExp(`^\\s*${key}\\s*=`);
  for (let i = start; i < end; i++) {
    if (!re.test(lines[i]!)) continue;
    for (let j = i + 1; j <= end; j++) {
      try {
        parseToml(lines.slice(i, j).join('\n'));
        return { from: i, to: j };
      } catch {
        // the value goes on over the next line
      }
    }
    return null;
  }
  return null;
}

function tomlEdit(text: string, wrap: ServerEntry[], o: WrapOptions, file: string): string {
  const nl = text.includes('\r\n') ? '\r\n' : '\n';
  const lines = text.split(nl);
  const replace: { from: number; to: number; text: string[] }[] = [];
  for (const e of wrap) {
    const h = lines.findIndex((l) => isHeaderOf(l, e.name));
    if (h < 0)
      throw new LeashError(
        'host_entry_uneditable',
        `${file}: server ${JSON.stringify(e.name)} is not written as a [mcp_servers.${tomlKey(e.name)}] table; wrap it by hand or leave it out with --server`,
        { file, server: e.name },
      );
    let end = lines.findIndex((l, i) => i > h && /^\s*\[/.test(l));
    if (end < 0) end = lines.length;
    const cmd = tomlKeyLines(lines, h + 1, end, 'command');
    if (cmd === null)
      throw new LeashError(
        'host_entry_uneditable',
        `${file}: no command line found for server ${JSON.stringify(e.name)}`,
        {
          file,
          server: e.name,
        },
      );
    const indent = /^\s*/.exec(lines[cmd.from]!)![0];
    const args = tomlKeyLines(lines, h + 1, end, 'args');
    const argsLine = `${indent}args = ${jsonArray(wrappedArgs(o, e))}`;
    replace.push({ from: cmd.from, to: cmd.to, text: [`${indent}command = ${JSON.stringify(o.leash)}`] });
    if (args !== null) replace.push({ from: args.from, to: args.to, text: [argsLine] });
    else replace.push({ from: cmd.to, to: cmd.to, text: [argsLine] });
  }
  replace.sort((a, b) => b.from - a.from || b.to - a.to);
  for (const r of replace) lines.splice(r.from, r.to - r.from, ...r.text);
  return lines.join(nl);
}

// ---- the wrap -------------------------------------------------------------------------------------

export interface WrapResult {
  text: string;
  wrapped: string[];
  entries: ServerEntry[];
}

/**
 * The file's text with the target servers wrapped, checked: the re-parsed result equals the parsed
 * original with exactly those entries' command and args replaced (anything else is a bug, refused).
 */
export function wrapConfig(format: HostFormat, text: string, file: string, o: WrapOptions): WrapResult {
  const { doc, tables } = parseDoc(format, text, file);
  const list = entries(tables);
  const wrap = targets(list, o, file);
  const out = format === 'json-mcpServers' ? applyEdits(text, jsonEdits(text, wrap, o)) : tomlEdit(text, wrap, o, file);
  // What the edit must give: the same document with only the wrapped entries changed.
  const expected = structuredClone(doc);
  for (const e of wrap) {
    let t: Obj = expected;
    for (const k of e.table) t = t[k] as Obj;
    const v = t[e.key] as Obj;
    v.command = o.leash;
    v.args = wrappedArgs(o, e);
  }
  const got = parseDoc(format, out, file).doc;
  const cmp = (x: unknown) => (format === 'json-mcpServers' ? x : JSON.parse(JSON.stringify(x)));
  if (!sameWithArgsLast(cmp(got), cmp(expected)))
    throw new LeashError(
      'host_entry_uneditable',
      `${file}: the edit would not give the intended document; nothing written`,
      {
        file,
      },
    );
  return { text: out, wrapped: wrap.map((e) => e.name), entries: list };
}

/** Deep equality where an entry's inserted `args` may sit in another key position. */
function sameWithArgsLast(a: unknown, b: unknown): boolean {
  return isDeepStrictEqual(sortKeys(a), sortKeys(b));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (!isObj(v)) return v;
  return Object.fromEntries(
    Object.keys(v)
      .sort()
      .map((k) => [k, sortKeys(v[k])]),
  );
}

/** The host a configuration file belongs to, from its name (`host list --file` without --host); null when unsure. */
export function inferHost(file: string): HostSpec | null {
  const base = path.basename(file);
  const id: HostId | null =
    base === '.claude.json' || base === '.mcp.json'
      ? 'claude-code'
      : base === 'claude_desktop_config.json'
        ? 'claude-desktop'
        : base === 'mcp.json' && path.basename(path.dirname(path.resolve(file))) === '.cursor'
          ? 'cursor'
          : base === 'config.toml'
            ? 'codex'
            : null;
  return id === null ? null : hostSpec(id);
}
