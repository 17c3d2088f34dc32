/**
 * Learning: the tightest-fit tools profile from calls the server answered successfully.
 * Only tools really called (never `*`), per-argument typed allow rules, anchored patterns, never
 * `.*`, class patterns guarded against `..` segments; a tool only ever called bare stays bare.
 */
import { METHOD_NOT_FOUND, rpcError } from '../../formats/jsonrpc.js';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { stringify as yamlStringify } from 'yaml';
import type { ArgRuleSpec } from '../judge/fields.js';
import {
  isObject,
  JsonNumber,
  parseStrict,
  stringifyAscii,
  type JsonObject,
  type JsonValue,
} from '../../formats/json.js';
import { LeashError } from '../../errors.js';
import { LineReader } from '../../formats/lines.js';
import { MAX_LINE } from '../gate/output.js';
import { normalizeToolName } from '../judge/names.js';

export interface LearnedCall {
  tool: string;
  arguments?: JsonValue;
}

/** Collects observations; `build()` turns them into a profile. */
export class Learner {
  private listed = new Set<string>();
  private calls = new Map<string, JsonValue[]>();
  succeeded = 0;
  failed = 0;
  revision: string | null = null;

  toolsListed(names: string[]): void {
    for (const n of names) this.listed.add(n);
  }

  /** A tools/call the server answered; only successes teach anything. */
  call(name: string, args: JsonValue | undefined, ok: boolean): void {
    if (!ok || (args !== undefined && !isObject(args))) {
      this.failed++;
      return;
    }
    this.succeeded++;
    const list = this.calls.get(name) ?? [];
    list.push(args ?? (Object.create(null) as JsonObject));
    this.calls.set(name, list);
  }

  build(): { profile: Record<string, unknown>; summary: string; leftOut: string[] } {
    const leftOut: string[] = [];
    const byNorm = new Map<string, string[]>();
    for (const n of this.calls.keys()) {
      const k = normalizeToolName(n);
      byNorm.set(k, [...(byNorm.get(k) ?? []), n]);
    }
    const allow: string[] = [];
    const args: Record<string, { allow: Record<string, ArgRuleSpec[]> }> = {};
    for (const [name, list] of [...this.calls.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (name.includes('*')) {
        leftOut.push(`${name} (a '*' cannot be written in a tools list)`);
        continue;
      }
      if ((byNorm.get(normalizeToolName(name)) ?? []).length > 1) {
        leftOut.push(`${name} (another called tool has the same name once normalised)`);
        continue;
      }
      const rules = learnArgs(list);
      if (rules === null) {
        leftOut.push(`${name} (an argument name with '.' or '*' cannot be written as a path)`);
        continue;
      }
      allow.push(name);
      if (Object.keys(rules).length) args[name] = { allow: rules };
    }
    const called = new Set(this.calls.keys());
    const notCalled = [...this.listed].filter((n) => !called.has(n)).sort();
    const profile: Record<string, unknown> = {
      _comment:
        'Learned by leash mcp learn: only the tools called and answered successfully, with the argument shapes seen. Review before enforcing.' +
        (leftOut.length ? ` Left out: ${leftOut.join('; ')}.` : ''),
      _not_called: notCalled,
      tools: {
        mode: 'whitelist',
        allow,
        deny: [],
        args,
        strict_args: true,
        hide_denied: true,
        log_args: 'denied',
      },
    };
    const summary =
      `learned from ${this.succeeded} successful call${this.succeeded === 1 ? '' : 's'}` +
      ` (${this.failed} not learned); tools listed: ${this.listed.size}, called: ${called.size};` +
      ` allowlisted the ${allow.length} called${leftOut.length ? ` (${leftOut.length} left out)` : ''}` +
      (this.revision ? `; server MCP revision ${this.revision}` : '');
    return { profile, summary, leftOut };
  }
}

const CLASSES: [RegExp, string][] = [
  [/^[0-9]*$/, '[0-9]'],
  [/^[a-z]*$/, '[a-z]'],
  [/^[a-zA-Z0-9_.-]*$/, '[a-zA-Z0-9_.-]'],
  [/^[a-zA-Z0-9_/.-]*$/, '[a-zA-Z0-9_/.-]'],
];
/** Refuses a `..` segment with either separator; prepended to every class pattern. */
export const DOTDOT_GUARD = '(?!.*(?:^|[/\\\\])\\.\\.(?:[/\\\\]|$))';

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');

function lcp(list: string[]): string {
  let p = list[0] ?? '';
  for (const s of list) {
    let k = 0;
    while (k < p.length && k < s.length && p[k] === s[k]) k++;
    p = p.slice(0, k);
  }
  // Never cut a surrogate pair in half.
  if (p.length && /[\ud800-\udbff]$/.test(p)) p = p.slice(0, -1);
  return p;
}

/** The tightest anchored pattern covering every observed string (never `.*`). */
export function learnStringPattern(values: string[]): string {
  const uniq = [...new Set(values)];
  if (uniq.length === 1) return `^${esc(uniq[0]!)}$`;
  const prefix = lcp(uniq);
  const rests = uniq.map((v) => v.slice(prefix.length));
  if (prefix.length > 0) {
    for (const [test, cls] of CLASSES) {
      if (rests.every((r) => test.test(r))) {
        const guard = cls.includes('.') ? DOTDOT_GUARD : '';
        return `^${guard}${esc(prefix)}${cls}*$`;
      }
    }
  }
  return `^(?:${uniq.sort().map(esc).join('|')})$`;
}

type Obs = Map<string, { strings: string[]; types: Set<string> }>;

function collect(v: JsonValue, p: string[], out: Obs): boolean {
  const key = p.length ? p.join('.') : '';
  const at = () => {
    let o = out.get(key);
    if (!o) out.set(key, (o = { strings: [], types: new Set() }));
    return o;
  };
  if (Array.isArray(v)) {
    if (v.length === 0) at().types.add('array');
    for (const x of v) if (!collect(x, [...p, '*'], out)) return false;
    return true;
  }
  if (isObject(v)) {
    const keys = Object.keys(v);
    if (keys.length === 0 && p.length) at().types.add('object');
    for (const k of keys) {
      if (k === '' || k.includes('.') || k === '*' || k === '**') return false;
      if (!collect(v[k]!, [...p, k], out)) return false;
    }
    return true;
  }
  if (typeof v === 'string') {
    const o = at();
    o.types.add('string');
    o.strings.push(v);
  } else if (typeof v === 'number' || v instanceof JsonNumber) at().types.add('number');
  else if (typeof v === 'boolean') at().types.add('boolean');
  else at().types.add('null');
  return true;
}

/** Allow rules for one tool from its successful calls' arguments; null when a key cannot be a path. */
export function learnArgs(calls: JsonValue[]): Record<string, ArgRuleSpec[]> | null {
  const obs: Obs = new Map();
  for (const c of calls) if (!collect(c, [], obs)) return null;
  const rules: Record<string, ArgRuleSpec[]> = {};
  for (const [p, o] of [...obs.entries()].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const list: ArgRuleSpec[] = [];
    for (const t of [...o.types].sort()) {
      if (t === 'string') list.push({ type: 'string', pattern: learnStringPattern(o.strings) });
      else if (t === 'object') list.push({ type: 'object', pattern: '^\\{\\}$' });
      else if (t === 'array') list.push({ type: 'array', pattern: '^\\[\\]$' });
      else list.push({ type: t as 'number' | 'boolean' | 'null' });
    }
    rules[p] = list;
  }
  return rules;
}

/** Renders a learned profile as the YAML `leash mcp --policy` reads. */
export function renderProfile(profile: Record<string, unknown>): string {
  // The notes are written as YAML comments, not keys: the file is then a Leash profile as it stands
  // (the config's fragment schema is strict), and still a `leash mcp --policy` file.
  const { _comment: comment, _not_called: notCalled, ...rest } = profile;
  const notes: string[] = [];
  if (typeof comment === 'string') notes.push(comment);
  if (Array.isArray(notCalled))
    notes.push(
      `Listed by the server but never called (left denied): ${notCalled.length ? notCalled.join(', ') : 'none'}`,
    );
  const body = yamlStringify(rest, { lineWidth: 0, aliasDuplicateObjects: false });
  return notes.map((n) => `# ${n.replace(/[\r\n]+/g, ' ')}\n`).join('') + body;
}

/** Writes a file atomically (temp file in the same directory, then rename). */
export function writeAtomic(file: string, text: string): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, text, { mode: 0o600 });
  try {
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
}

/** Reads and validates a calls script before any server is started. */
export function loadScript(file: string): LearnedCall[] {
  const text = fs.readFileSync(file);
  const v = parseStrict(text, { fileWhitespace: true });
  if (!Array.isArray(v)) throw new Error(`${file}: a calls script is a JSON array of {"tool", "arguments"}`);
  return v.map((c, i) => {
    if (!isObject(c)) throw new Error(`${file}[${i}]: each call is an object`);
    for (const k of Object.keys(c))
      if (k !== 'tool' && k !== 'arguments') throw new Error(`${file}[${i}]: unknown key '${k}'`);
    if (typeof c.tool !== 'string' || c.tool === '') throw new Error(`${file}[${i}].tool: a non-empty string`);
    if (c.arguments !== undefined && !isObject(c.arguments)) throw new Error(`${file}[${i}].arguments: an object`);
    return { tool: c.tool, arguments: c.arguments };
  });
}

/** Scripted learning failed (mcp_learn_failed): the server refused, died or did not answer. */
export class LearnError extends LeashError {
  constructor(message: string) {
    super('mcp_learn_failed', message);
  }
}

/**
 * Scripted learning: leash is the MCP client. Performs the handshake, lists tools, runs each call,
 * and returns the learner. Rejects (LearnError) when the server refuses the handshake, dies, or
 * does not answer within timeoutMs; the learner so far is attached as `partial`.
 */
export async function learnScripted(o: {
  command: string[];
  calls: LearnedCall[];
  timeoutMs: number;
  graceMs: number;
  errout: NodeJS.WritableStream;
}): Promise<Learner> {
  const learner = new Learner();
  const [cmd, ...args] = o.command;
  const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  let nextId = 1;
  const waiting = new Map<number, (v: JsonObject) => void>();
  let gone: string | null = null;
  let fail: ((e: Error) => void) | null = null;
  const died = new Promise<never>((_, reject) => (fail = reject));
  died.catch(() => undefined);
  const die = (why: string) => {
    if (gone) return;
    gone = why;
    fail?.(new LearnError(why));
  };
  child.on('error', (e: NodeJS.ErrnoException) => die(`cannot start the server: ${e.code ?? e.message}`));
  child.on('exit', () => die('the server exited'));
  child.stdin.on('error', () => die('the server closed its input'));
  const lines = new LineReader(
    (line) => {
      if (line.length === 0) return;
      let v: JsonValue;
      try {
        v = parseStrict(line);
      } catch {
        o.errout.write(
          `leash mcp learn: skipped a non-JSON line from the server: ${line.toString('utf8').slice(0, 200)}\n`,
        );
        return;
      }
      if (!isObject(v)) return;
      if (typeof v.method === 'string' && v.id !== undefined) {
        // A server-to-client request: we offer no client capabilities, so say so.
        child.stdin.write(stringifyAscii(rpcError(v.id, METHOD_NOT_FOUND, 'not supported')) + '\n');
        return;
      }
      if (typeof v.id === 'number') waiting.get(v.id)?.(v);
    },
    () => o.errout.write('leash mcp learn: skipped a line from the server longer than 64 MiB\n'),
    { maxBytes: MAX_LINE },
  );
  child.stdout.on('data', (c: Buffer) => lines.push(c));
  const send = (v: JsonObject) => child.stdin.write(stringifyAscii(v) + '\n');
  const request = (method: string, params: JsonObject): Promise<JsonObject> => {
    const id = nextId++;
    send({ jsonrpc: '2.0', id, method, params });
    const answer = new Promise<JsonObject>((resolve) => waiting.set(id, resolve));
    const racers: Promise<JsonObject>[] = [answer, died];
    if (o.timeoutMs > 0)
      racers.push(
        new Promise((_, reject) => {
          const t = setTimeout(
            () => reject(new LearnError(`the server did not answer ${method} within ${o.timeoutMs} ms`)),
            o.timeoutMs,
          );
          void answer.finally(() => clearTimeout(t));
        }),
      );
    return Promise.race(racers).finally(() => waiting.delete(id));
  };
  try {
    const init = await request('initialize', {
      protocolVersion: '2025-06-18',
      capabilities: {},
      clientInfo: { name: 'leash-mcp-learn', version: '0.1.0' },
    });
    if (isObject(init.error))
      throw new LearnError(`the server refused initialize: ${String(init.error.message ?? '')}`);
    if (isObject(init.result) && typeof init.result.protocolVersion === 'string')
      learner.revision = init.result.protocolVersion;
    send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    let cursor: JsonValue | undefined;
    for (let page = 0; page < 100; page++) {
      const r = await request('tools/list', cursor === undefined ? {} : { cursor });
      if (!isObject(r.result) || !Array.isArray(r.result.tools)) break;
      learner.toolsListed(r.result.tools.flatMap((t) => (isObject(t) && typeof t.name === 'string' ? [t.name] : [])));
      cursor = r.result.nextCursor;
      if (typeof cursor !== 'string') break;
    }
    for (const c of o.calls) {
      const params: JsonObject = { name: c.tool };
      if (c.arguments !== undefined) params.arguments = c.arguments;
      const r = await request('tools/call', params);
      const ok = r.result !== undefined && !(isObject(r.result) && r.result.isError === true);
      learner.call(c.tool, c.arguments, ok);
    }
  } catch (e) {
    (e as { partial?: Learner }).partial = learner;
    child.kill('SIGKILL');
    throw e;
  }
  // End the session the way the stdio transport asks: EOF, then grace, then SIGTERM.
  child.removeAllListeners('exit');
  const exited = new Promise<void>((r) =>
    child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', () => r()),
  );
  child.stdin.end();
  const t = setTimeout(() => child.kill('SIGTERM'), o.graceMs);
  const k = setTimeout(() => child.kill('SIGKILL'), o.graceMs + 5000);
  await exited;
  clearTimeout(t);
  clearTimeout(k);
  return learner;
}
