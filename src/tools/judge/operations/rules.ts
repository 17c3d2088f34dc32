/**
 * Rules over operations (`tools.rules`): compiled once, then judged against a normalised action.
 * Every matching deny wins; otherwise the first matching rule; otherwise `tools.default`. A rule
 * matches when each field it sets matches: `operations` the action's operation; `resources`,
 * `commands`, `hosts` and `methods` the action's paths, argvs, hosts and methods — for an allow or
 * ask every one of them (and at least one), for a deny any one. An `unknown` or ambiguous action
 * never inherits a default allow: it asks.
 */
import { matchGlob, normalizePath, parseGlob, type GlobToken } from '../../../engine/index.js';
import type { OperationRuleSpec } from '../fields.js';
import { normalizeCall, unknownAction, type Action } from './normalize.js';
import { mappingForServer, OPERATIONS, type MappingTable, type Operation } from './mappings.js';
import type { JsonValue } from '../../../formats/json.js';
import type { CompiledOps } from '../compile.js';
import type { GateSession, OpJudgment } from '../decide.js';

export type Effect = 'allow' | 'deny' | 'ask';

interface HostPattern {
  suffix: boolean;
  host: string;
}

export interface CompiledRule {
  id: string;
  effect: Effect;
  operations: Set<Operation> | null;
  /** `lit`: the glob's leading literal, which every path it covers starts with (a cheap test first). */
  resources: { text: string; tokens: GlobToken[]; lit: string }[] | null;
  commands: string[][] | null;
  hosts: HostPattern[] | null;
  methods: Set<string> | null;
}

/**
 * The rules that can match one operation, by index into `rules` (ascending): `always` holds those
 * whose resources (if any) could match a path under any top directory; `byTop` those every one of
 * whose resource globs starts with a literal `/top/`, filed under `top`. A rule can only match an
 * action whose paths include one under a top it is filed under (allow: every path matches, deny:
 * one does — either way one path matches), so only these candidates are tried.
 */
interface OperationIndex {
  always: number[];
  byTop: Map<string, number[]>;
  /** byTop's list with `always` merged in, ascending, per top: what an action with one path tries. */
  withAlways: Map<string, number[]>;
}

export interface CompiledRules {
  rules: CompiledRule[];
  default: Effect;
  /** Built by compileRules; a CompiledRules without it is judged by trying every rule. */
  index?: Map<Operation, OperationIndex>;
}

/** The first path component of an absolute path, or null for `/`. */
function topOf(p: string): string | null {
  const end = p.indexOf('/', 1);
  const top = end < 0 ? p.slice(1) : p.slice(1, end);
  return top === '' ? null : top;
}

/** The top directory every path a rule's resources cover lies under, or null (any). */
function ruleTop(r: CompiledRule): string | null {
  if (r.resources === null || r.resources.length === 0) return null;
  let top: string | null = null;
  for (const g of r.resources) {
    const end = g.lit.indexOf('/', 1);
    // `/srv` then nothing or a `/**` segment: every path is /srv or under it. `/proj*` or `/**`: any top.
    const next = g.tokens[1];
    const whole = next === undefined || next.t === 'segs';
    if (end < 0 && !whole) return null;
    const t = g.lit.slice(1, end < 0 ? undefined : end);
    if (t === '' || (top !== null && t !== top)) return null;
    top = t;
  }
  return top;
}

function buildIndex(rules: readonly CompiledRule[]): Map<Operation, OperationIndex> {
  const index = new Map<Operation, OperationIndex>();
  for (const op of OPERATIONS) index.set(op, { always: [], byTop: new Map(), withAlways: new Map() });
  rules.forEach((r, i) => {
    const top = ruleTop(r);
    for (const op of OPERATIONS) {
      if (r.operations !== null && !r.operations.has(op)) continue;
      const e = index.get(op)!;
      if (top === null) e.always.push(i);
      else {
        const l = e.byTop.get(top);
        if (l) l.push(i);
        else e.byTop.set(top, [i]);
      }
    }
  });
  for (const e of index.values())
    for (const [top, l] of e.byTop)
      e.withAlways.set(
        top,
        [...new Set([...l, ...e.always])].sort((x, y) => x - y),
      );
  return index;
}

/** The indices of the rules that can match the action, ascending. */
function candidates(a: Action, c: CompiledRules): readonly number[] | null {
  const e = c.index?.get(a.operation);
  if (e === undefined) return null;
  if (e.byTop.size === 0 || a.paths.length === 0) return e.always;
  if (a.paths.length === 1) {
    // The common case, one path: the merged list was made when the rules were compiled.
    const t = topOf(a.paths[0]!);
    return (t === null ? undefined : e.withAlways.get(t)) ?? e.always;
  }
  let out: number[] | null = null;
  for (const p of a.paths) {
    const t = topOf(p);
    const l = t === null ? undefined : e.byTop.get(t);
    if (l === undefined) continue;
    out = out === null ? [...l] : out.concat(l);
  }
  if (out === null) return e.always;
  out = out.concat(e.always);
  return [...new Set(out)].sort((x, y) => x - y);
}

export interface OpDecision {
  effect: Effect;
  /** allow: operation_allowed / operation_default_allowed; deny: operation_denied / operation_default_denied; ask: operation_ask. */
  reason: string;
  rule: string | null;
  /** Every rule that matched, in order. */
  matched: string[];
}

export interface RuleVariables {
  workspace: string;
  home: string;
}

const NET_FIELDS = ['hosts', 'methods'] as const;
const EXEC_OPS: ReadonlySet<Operation> = new Set(['shell.exec', 'git.read', 'git.write', 'git.remote']);
/** The operations whose actions name paths: fs.*, shell.exec and git.* (not net.request, db.*, unknown). */
const PATH_OPS: ReadonlySet<Operation> = new Set(
  OPERATIONS.filter((op) => op.startsWith('fs.') || op.startsWith('git.') || op === 'shell.exec'),
);

/** `${workspace}`, `${home}` and a leading `~` substituted; anything else in `${...}` is a problem. */
export function expandVariables(text: string, vars: RuleVariables): string | { problem: string } {
  let s = text;
  if (s === '~') s = vars.home;
  else if (s.startsWith('~/')) s = `${vars.home}/${s.slice(2)}`;
  let bad: string | null = null;
  s = s.replace(/\$\{([^}]*)\}/g, (_, name: string) => {
    if (name === 'workspace') return vars.workspace;
    if (name === 'home') return vars.home;
    bad ??= name;
    return '';
  });
  if (bad !== null) return { problem: `unknown variable \${${bad}} (known: \${workspace}, \${home}, ~)` };
  return s;
}

function operationSet(list: string[], where: string, problems: string[]): Set<Operation> {
  const out = new Set<Operation>();
  for (const o of list) {
    if (o === '*') OPERATIONS.forEach((x) => out.add(x));
    else if (o.endsWith('.*')) {
      const pre = o.slice(0, -1);
      const hit = OPERATIONS.filter((x) => x.startsWith(pre));
      if (hit.length === 0) problems.push(`${where}: no operation matches '${o}' (known: ${OPERATIONS.join(', ')})`);
      hit.forEach((x) => out.add(x));
    } else if ((OPERATIONS as readonly string[]).includes(o)) out.add(o as Operation);
    else problems.push(`${where}: unknown operation '${o}' (known: ${OPERATIONS.join(', ')})`);
  }
  return out;
}

function hostPattern(h: string, where: string, problems: string[]): HostPattern | null {
  let s = h.trim().toLowerCase();
  if (s.endsWith('.')) s = s.slice(0, -1);
  if (s === '*') return { suffix: true, host: '' };
  const suffix = s.startsWith('*.');
  const host = suffix ? s.slice(2) : s;
  if (host === '' || host.includes('*') || host.includes('/') || /\s/.test(host)) {
    problems.push(`${where}: '${h}' is not a host or *.domain`);
    return null;
  }
  return { suffix, host };
}

/** Compiles the rules; throws nothing, collects every problem as a `path: message` line. */
export function compileRules(
  specs: readonly OperationRuleSpec[],
  def: Effect,
  vars: RuleVariables,
  problems: string[],
): CompiledRules {
  const ids = new Set<string>();
  const rules: CompiledRule[] = [];
  specs.forEach((r, i) => {
    const at = `tools.rules.${i}`;
    if (ids.has(r.id)) problems.push(`${at}.id: duplicate rule id '${r.id}'`);
    ids.add(r.id);
    const ops = r.operations === undefined ? null : operationSet(r.operations, `${at}.operations`, problems);
    const resources =
      r.resources === undefined
        ? null
        : r.resources.flatMap((text, k) => {
            const x = expandVariables(text, vars);
            // `**/.env` is anywhere: the same as `/**/.env`.
            const e = typeof x === 'string' && x.startsWith('**') ? `/${x}` : x;
            if (typeof e !== 'string') {
              problems.push(`${at}.resources.${k}: ${e.problem}`);
              return [];
            }
            // In NFC, as paths are judged (paths.ts): one rule for every spelling of a name.
            const n = e.startsWith('/')
              ? (e.includes('*') ? e.replace(/\/+$/, '') || '/' : normalizePath(e))?.normalize('NFC')
              : null;
            if (n == null || !n.startsWith('/')) {
              problems.push(
                `${at}.resources.${k}: '${text}' is not an absolute path or glob once its variables are expanded`,
              );
              return [];
            }
            const g = parseGlob(n);
            if (!Array.isArray(g)) {
              problems.push(`${at}.resources.${k}: ${g.message}`);
              return [];
            }
            const first = g[0];
            return [{ text: n, tokens: g, lit: first !== undefined && first.t === 'lit' ? first.s : '' }];
          });
    const hosts =
      r.hosts === undefined
        ? null
        : r.hosts.flatMap((h, k) => {
            const p = hostPattern(h, `${at}.hosts.${k}`, problems);
            return p ? [p] : [];
          });
    const methods = r.methods === undefined ? null : new Set(r.methods.map((m) => m.toUpperCase()));
    // Impossible combinations: a field no operation of the rule can carry.
    if (ops !== null) {
      if ((r.hosts !== undefined || r.methods !== undefined) && !ops.has('net.request'))
        problems.push(`${at}: ${NET_FIELDS.join('/')} only match net.request, which the rule's operations leave out`);
      if (r.commands !== undefined && ![...ops].some((o) => EXEC_OPS.has(o)))
        problems.push(`${at}: commands only match shell.exec and git.*, which the rule's operations leave out`);
      if (r.resources !== undefined && ![...ops].some((o) => PATH_OPS.has(o)))
        problems.push(`${at}: resources only match fs.*, shell.exec and git.*, which the rule's operations leave out`);
    }
    if (r.commands !== undefined)
      r.commands.forEach((c, k) => {
        if (c.slice(0, -1).includes('**')) problems.push(`${at}.commands.${k}: '**' may only end an argv pattern`);
      });
    rules.push({
      id: r.id,
      effect: r.effect,
      operations: ops,
      resources,
      commands: r.commands === undefined ? null : r.commands.map((c) => [...c]),
      hosts,
      methods,
    });
  });
  return { rules, default: def, index: buildIndex(rules) };
}

function argvMatches(pat: readonly string[], argv: readonly string[]): boolean {
  for (let i = 0; i < pat.length; i++) {
    const p = pat[i]!;
    if (p === '**' && i === pat.length - 1) return true;
    if (i >= argv.length) return false;
    if (p !== '*' && p !== argv[i]) return false;
  }
  return pat.length === argv.length;
}

function hostMatches(p: HostPattern, h: string): boolean {
  if (p.suffix) return p.host === '' || h.endsWith(`.${p.host}`);
  return h === p.host;
}

/** every (allow/ask: at least one value, each matched) or some (deny) of `values` matched. */
function fieldMatches<T>(values: readonly T[], deny: boolean, one: (v: T) => boolean): boolean {
  if (values.length === 0) return false;
  return deny ? values.some(one) : values.every(one);
}

export function ruleMatches(r: CompiledRule, a: Action): boolean {
  if (r.operations !== null && !r.operations.has(a.operation)) return false;
  const deny = r.effect === 'deny';
  if (r.resources !== null) {
    const rs = r.resources;
    if (!fieldMatches(a.paths, deny, (p) => rs.some((g) => p.startsWith(g.lit) && matchGlob(g.tokens, p))))
      return false;
  }
  if (r.commands !== null) {
    const cs = r.commands;
    if (!fieldMatches(a.commands, deny, (argv) => cs.some((c) => argvMatches(c, argv)))) return false;
  }
  if (r.hosts !== null) {
    const hs = r.hosts;
    if (!fieldMatches(a.hosts, deny, (h) => hs.some((p) => hostMatches(p, h)))) return false;
  }
  if (r.methods !== null) {
    const ms = r.methods;
    if (!fieldMatches(a.methods, deny, (m) => ms.has(m))) return false;
  }
  return true;
}

/** The decision over one action: every matching deny wins, else the first match, else the default. */
export function decideAction(a: Action, c: CompiledRules): OpDecision {
  const matched: string[] = [];
  let firstDeny: string | null = null;
  let first: CompiledRule | null = null;
  const idx = candidates(a, c);
  const n = idx === null ? c.rules.length : idx.length;
  for (let k = 0; k < n; k++) {
    const r = c.rules[idx === null ? k : idx[k]!]!;
    if (!ruleMatches(r, a)) continue;
    matched.push(r.id);
    if (r.effect === 'deny' && firstDeny === null) firstDeny = r.id;
    first ??= r;
  }
  if (firstDeny !== null) return { effect: 'deny', reason: 'operation_denied', rule: firstDeny, matched };
  if (first !== null)
    return {
      effect: first.effect,
      reason: first.effect === 'allow' ? 'operation_allowed' : 'operation_ask',
      rule: first.id,
      matched,
    };
  // unknown and ambiguous actions never inherit a default allow.
  if (c.default === 'allow' && (a.operation === 'unknown' || a.ambiguous))
    return { effect: 'ask', reason: 'operation_unsure', rule: null, matched };
  if (c.default === 'allow') return { effect: 'allow', reason: 'operation_default_allowed', rule: null, matched };
  if (c.default === 'ask') return { effect: 'ask', reason: 'operation_ask', rule: null, matched };
  return { effect: 'deny', reason: 'operation_default_denied', rule: null, matched };
}

/** The table that reads a session's calls. */
export function tableFor(ops: CompiledOps, session: GateSession | undefined): MappingTable | null {
  if (ops.mapping !== 'auto') return ops.mapping;
  const n = session?.serverName;
  return n ? mappingForServer(n) : null;
}

/** Normalises a call through the session's table and judges it by the rules (never throws). */
export function judgeOperation(
  name: string,
  inputs: JsonValue | undefined,
  ops: CompiledOps,
  session?: GateSession,
): OpJudgment {
  let action: Action;
  try {
    action = normalizeCall(name, inputs, tableFor(ops, session), {
      workspace: ops.workspace,
      home: ops.home,
      walker: session?.walker ?? null,
      model: session?.model ?? null,
    });
  } catch {
    action = unknownAction(name, null, 'the call could not be read');
  }
  return { action, decision: decideAction(action, ops.rules) };
}

/** Whether a read of one absolute path is allowed by the rules (a listed entry, operations/listing.ts). */
export function readAllowed(ops: CompiledOps): (p: string) => boolean {
  return (p) => {
    const paths = p.normalize('NFC') === p ? [p] : [p, p.normalize('NFC')];
    const a: Action = { ...unknownAction('', null, ''), operation: 'fs.read', paths };
    delete a.why;
    return decideAction(a, ops.rules).effect === 'allow';
  };
}
