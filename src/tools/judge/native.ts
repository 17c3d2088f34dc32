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
 */
import { GATE_ENGINE, type CompiledArgPath, type CompiledGatePolicy, type CompiledToolArgs } from './compile.js';
import type { Judgment } from './decide.js';
import { inspectionNeeds, type DetectorNeed } from '../../engine/index.js';
import type { InspectAction, InspectCategory } from '../../engine/types.js';
import { normalizeToolName } from './names.js';
import { nativeTools } from '../../native.js';
import type { NativeGateJudge, NativeGateTool } from '../addon.js';

export interface NativeCallJudge {
  /** The params span line[start, end) of a scanned tools/call: a registered tool's index when certainly allowed, else -1. */
  judge(line: Buffer, start: number, end: number): number;
  /** After the JavaScript judge allowed a call to `name`: registers the name when nothing but the name decided. */
  learn(name: string, j: Judgment, tail: string | undefined): void;
  /** The allow line's tail (formatDecisionTail) of a registered tool, as the JavaScript judge wrote it. */
  tail(idx: number): string;
}

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
  const out = needs.map((n) => ({ all: n.all.map((g) => g.map(index)), digits: n.digits ?? 0 }));
  return literals.length > 64 ? null : { literals, needs: out };
}

/** A name the native judge compares as the bytes of an escape-free JSON string. */
const PLAIN_NAME = /^[\x20-\x21\x23-\x5b\x5d-\x7e]+$/;

/**
 * The native judge for a policy, or null when the policy asks for what it does not do: rules over
 * operations, arguments in every log line, a policed method denied, another engine than Leash's
 * (a test's), or no addon.
 */
export function createNativeCallJudge(policy: CompiledGatePolicy): NativeCallJudge | null {
  if (policy.ops !== null || policy.logArgs === 'all' || policy.engine !== GATE_ENGINE) return null;
  if (!policy.policed.has('tools/call') || policy.denyMethods.some((d) => d.re.test('tools/call'))) return null;
  const actions = (policy.tools as { tools?: { inspect?: Record<InspectCategory, InspectAction> } }).tools?.inspect;
  if (actions === undefined) return null;
  const needs = inspectionNeeds(actions);
  const wire = needs === null ? null : nativeNeeds(needs);
  if (wire === null) return null;
  let nj: NativeGateJudge;
  try {
    const addon = nativeTools();
    if (typeof addon.createGateJudge !== 'function') return null;
    nj = addon.createGateJudge({ strictArgs: policy.strictArgs, ...wire });
  } catch {
    return null;
  }
  const tails: string[] = [];
  const refused = new Set<string>();
  return {
    judge: nj.judge,
    tail: (idx) => tails[idx]!,
    learn(name, j, tail) {
      if (tail === undefined || refused.has(name) || tails.length >= 4096) return;
      if (j.action !== 'allow' || !j.policed || j.wouldBlock !== undefined || j.op !== undefined) return;
      if (j.method !== 'tools/call' || j.name !== name) return;
      const v = j.verdict;
      if (v === undefined || v.action !== 'allow' || v.at !== undefined || v.findings?.length) return;
      if (v.reason !== 'allow_entry' && v.reason !== 'mode_allow') return;
      // The gate keeps the server's directories up to date from this tool's answers (client.ts): JavaScript's.
      if (name === 'list_allowed_directories' || !PLAIN_NAME.test(name)) return void refused.add(name);
      const tool = nativeTool(policy.args.get(normalizeToolName(name)) ?? null);
      if (tool === undefined) return void refused.add(name);
      const idx = nj.add(name, tool);
      if (idx >= 0) tails[idx] = tail;
    },
  };
}
