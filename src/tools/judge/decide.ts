/**
 * Judging one JSON-RPC request against a compiled gate policy (./compile.ts), pure: the method's
 * selector, the engine's verdict on the tool name and inputs, the argument rules (deny checked
 * against every nested value, allow matching the exact shape, `..` never admitted by accident),
 * then the rules over operations; shadow mode turns a denial into a relayed would_block.
 */
import { INVALID_PARAMS, METHOD_NOT_FOUND } from '../../formats/jsonrpc.js';
import type { TOOLS_GATE_REASONS } from '../../errors.js';
import type { Verdict } from '../../engine/types.js';
import {
  asPlain,
  isObject,
  JsonNumber,
  jsonType,
  stringifyAscii,
  type JsonObject,
  type JsonValue,
} from '../../formats/json.js';
import { normalizeToolName, otherSpellingOf } from './names.js';
import type { Action } from './operations/normalize.js';
import type { PathWalker } from './operations/paths.js';
import type { ServerModel } from './operations/model.js';
import { judgeOperation, type OpDecision } from './operations/rules.js';
import type { ArgsReason, ArgsVerdict, CompiledArgRule, CompiledGatePolicy, CompiledToolArgs } from './compile.js';

/** What a gate session knows about its server: the mapping table its initialize answer selected. */
export interface GateSession {
  /** The gate's remembering walk (operations/paths.ts createValidatedWalker); a walk per path without one. */
  walker?: PathWalker | null;
  serverName: string | null;
  /** The gate's model of its server (operations/model.ts); none: relative paths are unknown. */
  model?: ServerModel | null;
}

/** Reasons the gate adds to the engine's (the catalogue and docs/errors.md list them). */
export type GateReason = keyof typeof TOOLS_GATE_REASONS;
// Compile-time guarantee that every argument-rule reason is in the catalogue.
const _argsReasonsCatalogued: ArgsReason extends GateReason ? true : false = true;
void _argsReasonsCatalogued;

export interface ToolVerdict {
  action: 'allow' | 'block' | 'ask';
  reason: string;
  rule: string | null;
  /** Where in the arguments an argument rule decided. */
  at?: string;
  findings?: Verdict['findings'];
}

/**
 * checkTool: the engine's tools decision (name, mode, allow/deny, inspection) and then the
 * argument rules of the tool, by its normalised name. Deny wins at every step.
 */
export function checkTool(name: string, inputs: JsonValue | undefined, policy: CompiledGatePolicy): ToolVerdict {
  let v: Verdict;
  try {
    v = toolVerdict(policy, name, inputs);
  } catch {
    return policy.failMode === 'open'
      ? { action: 'allow', reason: 'engine_error', rule: null }
      : { action: 'block', reason: 'engine_error', rule: null };
  }
  if (v.action === 'block') return { action: 'block', reason: v.reason, rule: v.rule, findings: v.findings };
  const a = checkArgs(inputs, policy.args.get(normalizeToolName(name)) ?? null, policy.strictArgs);
  if (!a.ok) return { action: 'block', reason: a.reason, rule: a.rule, at: a.at };
  // An ask passes the argument rules first: a human is never asked about a call they would deny anyway.
  return { action: v.action, reason: v.reason, rule: v.rule, findings: v.findings };
}

/**
 * The engine's verdict for a tool name (+ inputs, for inspection). The engine inspects plain values:
 * floats and big integers are handed over as doubles (the engine only reads its subject, so inputs
 * without either are handed over as they are).
 */
function toolVerdict(policy: CompiledGatePolicy, name: string, inputs: JsonValue | undefined): Verdict {
  const subject = { name, inputs: inputs === undefined ? undefined : asPlain(inputs) };
  return policy.engine.decide('tools', subject, policy.tools as never);
}

/** True when a tool is denied by name (and so hidden from tools/list under hide_denied). */
export function deniedByName(name: string, policy: CompiledGatePolicy): boolean {
  try {
    const v = toolVerdict(policy, name, undefined);
    return (
      v.action === 'block' && (v.reason === 'deny_entry' || v.reason === 'not_allowed' || v.reason === 'no_policy')
    );
  } catch {
    return policy.failMode !== 'open';
  }
}

export const ENVELOPE = ['jsonrpc', 'id', 'method', 'params', 'result', 'error'] as const;
export const SELECTORS = ['name', 'arguments', 'uri', 'ref'] as const;

/**
 * Why a call is asked, as its `action: ask` line says: an ask entry of tools.ask (`ask_entry`), an ask
 * rule of tools.rules (`ask_rule`), tools.default ask (`operation_ask`), or an unknown or ambiguous
 * call under a default that would allow (`operation_unsure`).
 */
export type AskReason = 'ask_entry' | 'ask_rule' | 'operation_ask' | 'operation_unsure';

/** A call the policy asks a human about: held by a gate that can ask, refused by one that cannot. */
export interface AskJudgment {
  action: 'ask';
  method: string;
  name: string;
  reason: AskReason;
  rule: string | null;
  /** The allow entry a `persist` decision writes (the tool name), or null when none would decide it. */
  persist: string | null;
  verdict?: ToolVerdict;
  op?: OpJudgment;
}

/** The result of judging one client request or notification. */
export type Judgment =
  | {
      action: 'allow';
      policed: boolean;
      method: string;
      name?: string;
      verdict?: ToolVerdict;
      op?: OpJudgment;
      /** Shadow mode: the denial this call would have met (logged as would_block), relayed instead. */
      wouldBlock?: { reason: string; rule: string | null; code: number };
    }
  | AskJudgment
  | {
      action: 'deny';
      code: number;
      message: string;
      reason: string;
      rule: string | null;
      method: string;
      name?: string;
      verdict?: ToolVerdict;
      op?: OpJudgment;
    };

/** The operation layer's part of a judgment: the normalised action and the rules' decision. */
export interface OpJudgment {
  action: Action;
  decision: OpDecision;
}

const deny = (
  code: number,
  message: string,
  reason: string,
  method: string,
  extra: { name?: string; rule?: string | null; verdict?: ToolVerdict; op?: OpJudgment } = {},
): Judgment => ({
  action: 'deny',
  code,
  message,
  reason,
  rule: extra.rule ?? null,
  method,
  name: extra.name,
  verdict: extra.verdict,
  op: extra.op,
});

/** JSON-RPC error code of a tool call the policy denies. */
export const DENIED_CODE = -32001;

const hasOwn = (o: JsonObject, k: string) => Object.prototype.hasOwnProperty.call(o, k);

function selectorOf(method: string, params: JsonObject): { sel: string; args?: JsonValue } | string {
  // The tool call first, without the closures the other methods use: it is most of the traffic.
  if (method === 'tools/call' || method === 'prompts/get') {
    if (hasOwn(params, 'uri') || hasOwn(params, 'ref')) return 'a second selector beside params.name';
    const n = params.name;
    if (typeof n !== 'string') return 'params.name must be a string';
    return { sel: n, args: params.arguments };
  }
  const has = (k: string) => hasOwn(params, k);
  const str = (k: string): string | null => (typeof params[k] === 'string' ? (params[k] as string) : null);
  if (method === 'resources/read' || method === 'resources/subscribe' || method === 'resources/unsubscribe') {
    if (has('name') || has('ref')) return 'a second selector beside params.uri';
    const u = str('uri');
    if (u === null) return 'params.uri must be a string';
    return { sel: u };
  }
  if (method === 'completion/complete') {
    if (has('name') || has('uri')) return 'a second selector beside params.ref';
    const ref = params.ref;
    if (!isObject(ref)) return 'params.ref must be an object';
    const bad = Object.keys(ref).find((k) => otherSpellingOf(k, ['name', 'uri', 'type']));
    if (bad !== undefined) return `params.ref has another spelling of a selector: ${JSON.stringify(bad)}`;
    const hasName = Object.prototype.hasOwnProperty.call(ref, 'name');
    const hasUri = Object.prototype.hasOwnProperty.call(ref, 'uri');
    if (hasName === hasUri) return 'params.ref must carry exactly one of name and uri';
    const v = hasName ? ref.name : ref.uri;
    if (typeof v !== 'string') return 'params.ref selector must be a string';
    if (ref.type !== (hasName ? 'ref/prompt' : 'ref/resource')) return 'params.ref.type does not match its selector';
    return { sel: v };
  }
  const hasName = has('name');
  const hasUri = has('uri');
  if (hasName === hasUri) return 'exactly one of params.name and params.uri is required';
  const v = hasName ? params.name : params.uri;
  if (typeof v !== 'string') return 'the selector must be a string';
  return { sel: v, args: hasName ? params.arguments : undefined };
}

/**
 * Judges one client request/notification by its method and params (pure; no logging).
 * deny_methods → -32601; a policed method's selector → the tool policy (name, arguments, inspection);
 * malformed params of a policed method → -32602.
 */
export function judgeRequest(
  method: string,
  params: JsonValue | undefined,
  policy: CompiledGatePolicy,
  session?: GateSession,
): Judgment {
  const j = judgeEnforced(method, params, policy, session);
  if (policy.shadow && j.action === 'ask') {
    // Shadow mode asks nobody: relayed, logged as the ask it would have been.
    const { reason, rule, name, verdict, op } = j;
    return {
      action: 'allow',
      policed: true,
      method: j.method,
      name,
      verdict,
      op,
      wouldBlock: { reason, rule, code: DENIED_CODE },
    };
  }
  if (!policy.shadow || j.action !== 'deny') return j;
  // Shadow mode: relayed, with the denial it would have been.
  const { reason, rule, code, name, verdict, op } = j;
  return { action: 'allow', policed: true, method: j.method, name, verdict, op, wouldBlock: { reason, rule, code } };
}

function judgeEnforced(
  method: string,
  params: JsonValue | undefined,
  policy: CompiledGatePolicy,
  session?: GateSession,
): Judgment {
  const m = normalizeToolName(method);
  for (const d of policy.denyMethods) {
    if (d.re.test(m))
      return deny(METHOD_NOT_FOUND, `method not allowed: ${method}`, 'method_denied', method, { rule: d.glob });
  }
  if (!policy.policed.has(m)) return { action: 'allow', policed: false, method };
  if (!isObject(params)) return deny(INVALID_PARAMS, 'params must be an object', 'bad_params', method);
  for (const k of Object.keys(params)) {
    const c = otherSpellingOf(k, SELECTORS);
    if (c)
      return deny(
        INVALID_PARAMS,
        `params member ${JSON.stringify(k)} is another spelling of ${c}`,
        'bad_params',
        method,
      );
  }
  const s = selectorOf(m, params);
  if (typeof s === 'string') return deny(INVALID_PARAMS, s, 'bad_selector', method);
  const inputs = m === 'tools/call' || m === 'prompts/get' || s.args !== undefined ? s.args : undefined;
  const v = checkTool(s.sel, inputs, policy);
  if (v.action === 'block') {
    const code = v.reason === 'args_not_object' || v.reason === 'args_too_deep' ? INVALID_PARAMS : DENIED_CODE;
    return deny(code, `denied by leash: ${v.reason}${v.at ? ` at ${v.at}` : ''}`, v.reason, method, {
      name: s.sel,
      rule: v.rule,
      verdict: v,
    });
  }
  if (v.action === 'ask') {
    // Held for a human by a gate that can ask (the service's); a gate that cannot refuses at once.
    return {
      action: 'ask',
      method,
      name: s.sel,
      reason: 'ask_entry',
      rule: v.rule,
      persist: policy.persistable ? s.sel : null,
      verdict: v,
    };
  }
  if (policy.ops !== null && m === 'tools/call') {
    const op = judgeOperation(s.sel, inputs, policy.ops, session);
    if (op.decision.effect === 'ask') {
      const d = op.decision;
      const reason: AskReason =
        d.rule !== null ? 'ask_rule' : d.reason === 'operation_unsure' ? d.reason : 'operation_ask';
      // An allow entry is not what decides a call under rules over operations: nothing to persist.
      return { action: 'ask', method, name: s.sel, reason, rule: d.rule, persist: null, verdict: v, op };
    }
    if (op.decision.effect !== 'allow') {
      const reason = op.decision.reason;
      return deny(DENIED_CODE, `denied by leash: ${reason} (${op.action.operation})`, reason, method, {
        name: s.sel,
        rule: op.decision.rule,
        verdict: v,
        op,
      });
    }
    return {
      action: 'allow',
      policed: true,
      method,
      name: s.sel,
      verdict: { ...v, reason: op.decision.reason, rule: op.decision.rule },
      op,
    };
  }
  return { action: 'allow', policed: true, method, name: s.sel, verdict: v };
}

/**
 * An asked call refused by a gate that has no approver to ask (run with --policy, no service): the
 * same refusal and reason as the service's queue with nobody subscribed, `approval_unavailable`.
 */
export function askUnavailable(j: AskJudgment): Extract<Judgment, { action: 'deny' }> {
  const why = j.op ? ` (${j.op.action.operation})` : '';
  return deny(DENIED_CODE, `denied by leash: approval_unavailable${why}`, 'approval_unavailable', j.method, {
    name: j.name,
    rule: j.rule,
    ...(j.verdict ? { verdict: j.verdict } : {}),
    ...(j.op ? { op: j.op } : {}),
  }) as Extract<Judgment, { action: 'deny' }>;
}

/** Arguments nested deeper than this are denied outright. */
export const MAX_ARG_DEPTH = 100;

/**
 * Matches glob segments (`*` one, `**` any number) against a concrete path, exactly; `len` cuts
 * the path to its first `len` segments (a prefix, without copying it).
 */
function segsMatch(pat: string[], pi: number, path: string[], ti: number, len = path.length): boolean {
  if (pi === pat.length) return ti === len;
  const p = pat[pi]!;
  if (p === '**') {
    for (let k = ti; k <= len; k++) if (segsMatch(pat, pi + 1, path, k, len)) return true;
    return false;
  }
  if (ti === len) return false;
  return (p === '*' || p === path[ti]) && segsMatch(pat, pi + 1, path, ti + 1, len);
}

/** True when the pattern matches the path or any prefix of it (a deny rule covers everything below). */
function segsMatchPrefix(pat: string[], path: string[]): boolean {
  for (let k = 0; k <= path.length; k++) if (segsMatch(pat, 0, path, 0, k)) return true;
  return false;
}

interface Leaf {
  path: string[];
  value: JsonValue;
  text: string;
  /** A space-joined array of scalars: checked by deny rules only. */
  joined?: boolean;
}

function scalarText(v: JsonValue): string {
  if (typeof v === 'string') return v;
  if (v instanceof JsonNumber) return v.text;
  return stringifyAscii(v);
}

function isScalar(v: JsonValue): boolean {
  return v === null || typeof v !== 'object' || v instanceof JsonNumber;
}

/** `path` with one more segment: a copy (each leaf keeps its own path), made without a spread. */
function extend(path: string[], seg: string): string[] {
  const n = path.length;
  if (n === 0) return [seg];
  const out = path.slice();
  out.push(seg);
  return out;
}

/** Every value in the arguments (scalars and empty containers), with its path; null when too deep. */
function leaves(v: JsonValue, path: string[], out: Leaf[], depth: number): boolean {
  if (depth > MAX_ARG_DEPTH) return false;
  if (Array.isArray(v)) {
    if (v.length === 0) {
      out.push({ path, value: v, text: '[]' });
      return true;
    }
    if (v.every(isScalar)) out.push({ path, value: v, text: v.map(scalarText).join(' '), joined: true });
    for (let k = 0; k < v.length; k++) if (!leaves(v[k]!, extend(path, String(k)), out, depth + 1)) return false;
    return true;
  }
  if (isObject(v)) {
    const keys = Object.keys(v);
    if (keys.length === 0) {
      out.push({ path, value: v, text: '{}' });
      return true;
    }
    for (const k of keys) if (!leaves(v[k]!, extend(path, k), out, depth + 1)) return false;
    return true;
  }
  out.push({ path, value: v, text: scalarText(v) });
  return true;
}

const DOTDOT = /(?:^|[/\\])\.\.(?:[/\\]|$)/;

function ruleMatches(r: CompiledArgRule, leaf: Leaf, forAllow: boolean): boolean {
  if (r.type !== null && !leaf.joined && jsonType(leaf.value) !== r.type) return false;
  if (r.type !== null && leaf.joined && r.type !== 'string') return false;
  if (r.re && !r.re.test(leaf.text)) return false;
  if (forAllow && !r.admitsDotDot && leaf.text.includes('..') && DOTDOT.test(leaf.text)) return false;
  return true;
}

const atOf = (path: string[]): string => (path.length ? path.join('.') : '(arguments)');

/**
 * Judges one call's arguments against a tool's compiled rules.
 * `args` undefined means the call carried none (treated as `{}`); a non-object is refused.
 * Deny is checked first against every value and every space-joined array of scalars; then, when
 * the tool has allow rules, every value must be admitted by a rule at exactly its path;
 * with no allow rules and `strictArgs`, only empty arguments pass.
 */
export function checkArgs(
  args: JsonValue | undefined,
  rules: CompiledToolArgs | null,
  strictArgs: boolean,
): ArgsVerdict {
  if (args === undefined) args = Object.create(null) as JsonValue;
  if (!isObject(args)) return { ok: false, reason: 'args_not_object', rule: null, at: '(arguments)' };
  let hasKeys = false;
  for (const _ in args) {
    hasKeys = true;
    break;
  }
  if (!rules || (rules.deny.length === 0 && (rules.allowAny || rules.allow.length === 0))) {
    // No rule reads a value: only the depth limit and strict_args apply.
    if (hasKeys && !leaves(args, [], [], 0))
      return { ok: false, reason: 'args_too_deep', rule: null, at: '(arguments)' };
    if (rules?.allowAny) return { ok: true };
    if (strictArgs && hasKeys) return { ok: false, reason: 'strict_args', rule: null, at: '(arguments)' };
    return { ok: true };
  }
  const all: Leaf[] = [];
  if (hasKeys && !leaves(args, [], all, 0))
    return { ok: false, reason: 'args_too_deep', rule: null, at: '(arguments)' };
  // Plain loops (no closures): this runs on every policed call.
  for (let li = 0; li < all.length && rules.deny.length > 0; li++) {
    const leaf = all[li]!;
    // Deny paths match case-insensitively; most argument names are lower case already.
    let folded = leaf.path;
    for (let k = 0; k < folded.length; k++) {
      if (folded[k] !== folded[k]!.toLowerCase()) {
        folded = leaf.path.map((seg) => seg.toLowerCase());
        break;
      }
    }
    for (const p of rules.deny) {
      if (!segsMatchPrefix(p.segs, folded)) continue;
      for (const r of p.rules) {
        if (r.type !== null && jsonType(leaf.value) !== r.type && !(leaf.joined && r.type === 'string')) continue;
        if (r.re ? r.re.test(leaf.text) : true)
          return { ok: false, reason: 'arg_denied', rule: `${p.raw}: ${r.src}`, at: atOf(leaf.path) };
      }
    }
  }
  if (rules.allowAny) return { ok: true };
  if (rules.allow.length === 0) {
    if (strictArgs && hasKeys) return { ok: false, reason: 'strict_args', rule: null, at: '(arguments)' };
    return { ok: true };
  }
  for (let li = 0; li < all.length; li++) {
    const leaf = all[li]!;
    if (leaf.joined) continue;
    let admitted = false;
    for (let pi = 0; pi < rules.allow.length && !admitted; pi++) {
      const p = rules.allow[pi]!;
      if (!segsMatch(p.segs, 0, leaf.path, 0)) continue;
      for (let ri = 0; ri < p.rules.length; ri++) {
        if (ruleMatches(p.rules[ri]!, leaf, true)) {
          admitted = true;
          break;
        }
      }
    }
    if (!admitted) return { ok: false, reason: 'arg_not_allowed', rule: null, at: atOf(leaf.path) };
  }
  return { ok: true };
}
