/** The terminal's verdict on one argv: the engine's commands surface, then the PATH rule and deny_args. */
import path from 'node:path';
import type { Verdict } from '../../engine/types.js';
import { commandEntryMatches } from '../../engine/index.js';
import { matchDenyArgs } from './match.js';
import type { ResolvedBinary } from './resolve.js';
import type { CommandDecider, TerminalPolicy } from './types.js';

/** The terminal's verdict on one argv: the engine's commands surface, then deny_args. */
export interface Judgement {
  allowed: boolean;
  /** Engine reason, or deny_args when an argument rule decided. */
  reason: string;
  rule: string | null;
  /** The path the decision was taken on (the real file that would run, when it exists). */
  binary: string;
  /** Human-readable and names what decided; returned to the client as policy_reason. */
  policyReason: string;
  /** Shadow mode: the policy denies it (reason, rule), and it runs; logged as would_block. */
  wouldBlock?: true;
}

function describe(name: string, binary: string): string {
  return binary === name ? `command '${name}'` : `command '${name}' (${binary})`;
}

function why(v: Verdict, name: string, binary: string, mode: string | null): string {
  const what = describe(name, binary);
  switch (v.reason) {
    case 'allow_entry':
      return `${what} is allowed by allow entry '${v.rule ?? '?'}'`;
    case 'mode_allow':
      return `${what} is allowed: blacklist mode and no deny entry matched`;
    case 'deny_entry':
      return `${what} is denied by deny entry '${v.rule ?? '?'}'`;
    case 'not_allowed':
      return `${what} is denied: not on the allow list (${mode ?? 'whitelist'} mode)`;
    case 'no_policy':
      return v.action === 'allow'
        ? `${what} is allowed: no resolved policy and fail_mode open`
        : `${what} is denied: no resolved policy (fail closed)`;
    case 'engine_error':
      return v.action === 'allow'
        ? `${what} is allowed: the engine failed and fail_mode is open`
        : `${what} is denied: the engine failed (fail closed)`;
    default:
      return `${what} is ${v.action === 'allow' ? 'allowed' : 'denied'} (${v.reason})`;
  }
}

/**
 * Judges argv against the policy. Every candidate path of the binary is asked of the engine: the
 * path found on PATH (or given) and its real path, so a symlink can neither carry a denied file in
 * under an allowed name nor hide a denied name behind its target; any block wins. The subject
 * logged is the real path, which is what the kernel's exec event will name.
 *
 * `pathDirs` (the terminal's PATH directories, lexical and real): a basename allow entry then only
 * admits a binary that lives in one of them. The engine lets a basename match in any directory, so
 * without this a copy of any program saved in the jail as `ls` would run under an `ls` entry; a
 * binary outside PATH needs an absolute-path entry.
 */
export function judge(...args: Parameters<typeof judgeEnforced>): Judgement {
  const j = judgeEnforced(...args);
  const policy = args[2];
  return policy?.enforce === 'shadow' && !j.allowed ? { ...j, allowed: true, wouldBlock: true } : j;
}

/** judge() before shadow mode: argv, the binary resolved, the policy, the engine's decider, the PATH directories. */
function judgeEnforced(
  argv: readonly string[],
  resolved: ResolvedBinary,
  policy: TerminalPolicy | null,
  decide: CommandDecider,
  pathDirs?: readonly string[],
): Judgement {
  const name = argv[0]!;
  const mode = policy?.commands.mode ?? null;
  const subject = resolved.real ?? resolved.path ?? name;
  const candidates = [...new Set([subject, resolved.path ?? subject])];
  let allowVerdict: Verdict | null = null;
  for (const b of candidates) {
    let v: Verdict;
    try {
      v = decide(b);
    } catch {
      v = { action: 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
    }
    // leash terminal holds nothing: an ask is refused like a block (docs/approvals.md).
    if (v.action !== 'allow') {
      return { allowed: false, reason: v.reason, rule: v.rule, binary: subject, policyReason: why(v, name, b, mode) };
    }
    if (b === subject) allowVerdict = v;
  }
  const v = allowVerdict!;
  if (pathDirs && v.reason === 'allow_entry' && v.rule !== null && !v.rule.includes('/') && subject.includes('/')) {
    const onPath = [resolved.path, resolved.real].some((b) => b !== null && pathDirs.includes(path.posix.dirname(b)));
    if (!onPath) {
      return {
        allowed: false,
        reason: 'not_on_path',
        rule: v.rule,
        binary: subject,
        policyReason:
          `${describe(name, subject)} is denied: allow entry '${v.rule}' admits only a binary in the terminal's ` +
          `PATH directories; allow one elsewhere by its absolute path`,
      };
    }
  }
  const names = [...candidates, name];
  for (const [key, rule] of Object.entries(policy?.commands.args ?? {})) {
    if (!names.some((n) => commandEntryMatches(key, n))) continue;
    const hit = matchDenyArgs(rule.deny_args, argv.slice(1));
    if (hit !== null) {
      const extra = rule.reason ? `: ${rule.reason}` : '';
      return {
        allowed: false,
        reason: 'deny_args',
        rule: `${key}: ${hit}`,
        binary: subject,
        policyReason: `${describe(name, subject)} is denied by deny_args '${hit}' of '${key}'${extra}`,
      };
    }
  }
  return { allowed: true, reason: v.reason, rule: v.rule, binary: subject, policyReason: why(v, name, subject, mode) };
}
