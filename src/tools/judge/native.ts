/**
 * The gate's native judge of a plain tools/call (native/tools/gatejudge_core.h): a call to a tool the
 * JavaScript judge already allowed by name, whose arguments the native code can read and check
 * exactly (no escape, integers only; argument patterns that are literals or deterministic
 * atoms) and in whose bytes no detector's need occurs (src/engine/needs.ts DETECTOR_NEEDS), is
 * allowed without JavaScript reading its params. Anything else, every denial included, is judged by
 * ./decide.ts as before: the native judge only ever says "certainly allowed" or "not sure".
 *
 * A name is registered after the JavaScript judge allowed a call to it by the registry alone (allow
 * entry or a blacklist's default, no finding, no operation), with the tool's argument rules; the
 * registry's verdict depends on the name alone and the gate's policy never changes while it runs.
 * tests/native/gatejudge-diff.test.ts compares the two judges on generated policies and calls.
 *
 * Under rules over operations (a declared mapping table, or the server's) the native judge also reads the call's one path
 * argument and judges it by the rules (native/tools/opsjudge_core.h): a tool is registered after JavaScript
 * allowed a call to it, and each rule that allowed one gets its allow line as a template around the path.
 * tests/native/gatejudge-ops-diff.test.ts compares that part.
 */
import { GATE_ENGINE, type CompiledArgPath, type CompiledGatePolicy, type CompiledToolArgs } from './compile.js';
import type { Judgment } from './decide.js';
import { inspectionNeeds, maskingNeeds, type DetectorNeed } from '../../engine/index.js';
import type { InspectAction, InspectCategory } from '../../engine/types.js';
import { normalizeToolName } from './names.js';
import { nativeTools } from '../../native.js';
import type { NativeGateJudge, NativeGateTool, NativeOpsConfig } from '../addon.js';
import { OPERATIONS, type MappingTable } from './operations/mappings.js';
import type { PathWalker } from './operations/paths.js';
import type { CompiledRules } from './operations/rules.js';

export interface NativeCallJudge {
  /** The params span line[start, end) of a scanned tools/call: a registered tool's index when certainly allowed, else -1. */
  judge(line: Buffer, start: number, end: number): number;
  /** After the JavaScript judge allowed a call to `name`: registers the name when nothing but the name decided. */
  learn(name: string, j: Judgment, tail: string | undefined): void;
  /** The allow line's tail (formatDecisionTail) of what `judge` answered `idx` for, on `line` (the path at [start, end)). */
  tail(idx: number, line: Buffer, start?: number, end?: number): string;
  /**
   * The whole lines from byte `at` of a client chunk that are plain tools/calls this judge certainly allows, as
   * `judge` answers them line by line (native/tools/gatejudge.cc): how many, with the k-th's end (after its LF),
   * id, answer and path span at lines[5k..5k+4] (`lines` as given to createNativeCallJudge).
   */
  requests(chunk: Buffer, at: number): number;
}

/** Lines the chunk readers (NativeCallJudge.requests, scan.ts nativeAnswerReader) answer per call at most. */
export const CHUNK_LINES = 64;

const TYPE_CODES: Record<string, number> = { string: 0, number: 1, boolean: 2, null: 3, object: 4, array: 5 };

/** A tool's argument rules in native form, or undefined when a rule cannot be checked natively. */
export function nativeTool(args: CompiledToolArgs | null): NativeGateTool | null | undefined {
  if (args === null) return null;
  const paths = (ps: CompiledArgPath[]) => {
    const out: NativeGateTool['allow'] = [];
    for (const p of ps) {
      const rules: NativeGateTool['allow'][number]['rules'] = [];
      for (const r of p.rules) {
        const type = r.type === null ? -1 : TYPE_CODES[r.type];
        if (type === undefined) return undefined;
        if (r.re !== null && r.re.native === undefined) return undefined;
        rules.push({ type, re: r.re?.native ?? null, admitsDotDot: r.admitsDotDot });
      }
      out.push({ segs: p.segs, rules });
    }
    return out;
  };
  const allow = paths(args.allow);
  const deny = paths(args.deny);
  if (allow === undefined || deny === undefined) return undefined;
  return { allowAny: args.allowAny, allow, deny };
}

/** The literals and needs of the active detectors, as the native judge takes them (null: more than 64 literals). */
export function nativeNeeds(
  needs: DetectorNeed[],
): { literals: string[]; needs: { all: number[][]; digits: number }[] } | null {
  const literals: string[] = [];
  const index = (l: string) => {
    let k = literals.indexOf(l);
    if (k < 0) k = literals.push(l) - 1;
    return k;
  };
  // The native judge reads printable ASCII only: a literal beyond it never occurs there, and a need none of whose
  // literals in some group can occur is never met there.
  const ascii = (l: string) => /^[\x20-\x7e]+$/.test(l);
  const out = needs
    .filter((n) => n.all.every((g) => g.some(ascii)))
    .map((n) => ({ all: n.all.map((g) => g.filter(ascii).map(index)), digits: n.digits ?? 0 }));
  return literals.length > 64 ? null : { literals, needs: out };
}

/** A name the native judge compares as the bytes of an escape-free JSON string. */
const PLAIN_NAME = /^[\x20-\x21\x23-\x5b\x5d-\x7e]+$/;

const EFFECTS = { allow: 0, deny: 1, ask: 2 } as const;

/** The rules over operations in native form, or null when they lack the index the native judge follows. */
export function nativeOps(rules: CompiledRules): Omit<NativeOpsConfig, 'memory' | 'span'> | null {
  const index = rules.index;
  if (index === undefined) return null;
  return {
    default: EFFECTS[rules.default],
    rules: rules.rules.map((r) => ({
      effect: EFFECTS[r.effect],
      never: r.commands !== null || r.hosts !== null || r.methods !== null,
      resources: r.resources?.map((g) => ({ lit: g.lit, tokens: g.tokens })) ?? null,
    })),
    index: OPERATIONS.map((op) => {
      const e = index.get(op)!;
      return { always: e.always, tops: [...e.withAlways] };
    }),
  };
}

/** A resource the native judge reads as JavaScript writes it: printable ASCII needing no escape, uncut. */
const PLAIN_RESOURCE = /^\/[\x20-\x21\x23-\x5b\x5d-\x7e]{1,199}$/;

/**
 * What the native judge may take of a tool of `table`: its operation's code and its one path argument, or null
 * (no path, several, an array, a base, a URL, SQL, a command or a listing; a write or delete, whose dangling
 * symlinks normalize.ts follows).
 */
export function nativeMapping(table: MappingTable, name: string): { operation: number; arg: string } | null {
  if (!Object.prototype.hasOwnProperty.call(table.tools, name)) return null;
  const m = table.tools[name]!;
  if (m.url || m.host || m.sql || m.command || m.listing || m.paths?.length !== 1) return null;
  const spec = m.paths[0]!;
  if (spec.array === true || spec.base !== undefined) return null;
  if (m.operation === 'fs.write' || m.operation === 'fs.delete' || m.operation === 'unknown') return null;
  return { operation: OPERATIONS.indexOf(m.operation), arg: spec.arg };
}

/**
 * The native judge for a policy, or null when the policy asks for what it does not do: rules over operations
 * without a table (declared, or the server's under `mapping: auto`) or a remembering walk, arguments in every log
 * line, a policed method denied, another engine than Leash's (a test's), or no addon.
 */
export function createNativeCallJudge(
  policy: CompiledGatePolicy,
  walker?: PathWalker | null,
  /** Under `mapping: auto`: the table the server's name selected. */
  serverTable?: MappingTable,
  /** Where `requests` writes: 5 * CHUNK_LINES numbers over an ArrayBuffer of its own. */
  lines: Float64Array = new Float64Array(new ArrayBuffer(8 * 5 * CHUNK_LINES)),
): NativeCallJudge | null {
  if (policy.logArgs === 'all' || policy.engine !== GATE_ENGINE) return null;
  if (!policy.policed.has('tools/call') || policy.denyMethods.some((d) => d.re.test('tools/call'))) return null;
  const actions = (policy.tools as { tools?: { inspect?: Record<InspectCategory, InspectAction> } }).tools?.inspect;
  if (actions === undefined) return null;
  const ops = policy.ops;
  const table = ops === null ? null : ops.mapping === 'auto' ? (serverTable ?? null) : ops.mapping;
  const memory = walker?.cache;
  const opsWire = ops === null ? null : nativeOps(ops.rules);
  if (ops !== null && (table === null || memory === undefined || opsWire === null)) return null;
  // Under rules over operations the allow line names the path, masked: a path meeting no masking need is itself.
  const needs = inspectionNeeds(actions);
  const masking = ops === null ? [] : maskingNeeds();
  const wire = needs === null || masking === null ? null : nativeNeeds([...needs, ...masking]);
  if (wire === null) return null;
  // Over an ArrayBuffer of its own: never moved by the garbage collector while the addon holds its address.
  const span = new Int32Array(new ArrayBuffer(8));
  let nj: NativeGateJudge;
  try {
    const addon = nativeTools();
    if (typeof addon.createGateJudge !== 'function') return null;
    nj = addon.createGateJudge({
      strictArgs: policy.strictArgs,
      ...wire,
      ...(opsWire === null ? {} : { ops: { ...opsWire, memory: memory!, span } }),
      lines,
    });
    if (ops !== null && typeof nj.addTemplate !== 'function') return null;
  } catch {
    return null;
  }
  // By answer index: the whole tail (by name), or the halves of the tail around the path (operations).
  const heads: string[] = [];
  const rests: (string | undefined)[] = [];
  const refused = new Set<string>();
  const ruleIndex = new Map(ops?.rules.rules.map((r, i) => [r.id, i]) ?? []);
  const learnOp = (name: string, j: Judgment, tail: string, tool: NativeGateTool | null): void => {
    const op = j.op;
    const m = nativeMapping(table!, name);
    if (op === undefined || m === null || op.decision.effect !== 'allow') return;
    const rule = op.decision.rule === null ? -1 : ruleIndex.get(op.decision.rule);
    const p = op.action.paths;
    if (rule === undefined || p.length !== 1 || !PLAIN_RESOURCE.test(p[0]!)) return;
    const open = '"resources":["';
    const key = `${open}${p[0]!}"]`;
    const at = tail.indexOf(key);
    if (at < 0 || tail.indexOf(key, at + 1) >= 0) return;
    const idx = nj.add(name, tool, m);
    const k = idx < 0 ? -1 : nj.addTemplate!(idx, rule);
    if (k < 0) return;
    heads[k] = tail.slice(0, at + open.length);
    rests[k] = tail.slice(at + open.length + p[0]!.length);
  };
  const requests = nj.requests;
  return {
    judge: nj.judge,
    requests: requests === undefined ? () => 0 : requests,
    tail: (idx, line, start = span[0], end = span[1]) =>
      rests[idx] === undefined ? heads[idx]! : heads[idx]! + line.toString('latin1', start, end) + rests[idx],
    learn(name, j, tail) {
      if (tail === undefined || refused.has(name)) return;
      if (j.action !== 'allow' || !j.policed || j.wouldBlock !== undefined) return;
      if (j.method !== 'tools/call' || j.name !== name || (ops === null) !== (j.op === undefined)) return;
      const v = j.verdict;
      if (v === undefined || v.action !== 'allow' || v.at !== undefined || v.findings?.length) return;
      if (ops === null && v.reason !== 'allow_entry' && v.reason !== 'mode_allow') return;
      // The gate keeps the server's directories up to date from this tool's answers (client.ts): JavaScript's.
      if (name === 'list_allowed_directories' || !PLAIN_NAME.test(name)) return void refused.add(name);
      const tool = nativeTool(policy.args.get(normalizeToolName(name)) ?? null);
      if (tool === undefined) return void refused.add(name);
      if (ops !== null) return learnOp(name, j, tail, tool);
      if (heads.length >= 4096) return;
      const idx = nj.add(name, tool);
      if (idx >= 0) heads[idx] = tail;
    },
  };
}
