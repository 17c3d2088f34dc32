import type { FailMode, SurfacePolicy, Verdict } from '../../engine/types.js';
import type { ArgRule } from './fields.js';

/** Every outcome of a terminal call maps to exactly one code (docs/terminal.md, docs/errors.md). */
export type ResultCode =
  | 'OK'
  | 'POLICY_DENIED'
  | 'PARSE_ERROR'
  | 'TIMEOUT'
  | 'OUTPUT_TRUNCATED'
  | 'CWD_ESCAPE'
  | 'EXEC_ERROR'
  | 'AUDIT_UNAVAILABLE'
  | 'INTERNAL_ERROR';

export const RESULT_CODES: readonly ResultCode[] = [
  'OK',
  'POLICY_DENIED',
  'PARSE_ERROR',
  'TIMEOUT',
  'OUTPUT_TRUNCATED',
  'CWD_ESCAPE',
  'EXEC_ERROR',
  'AUDIT_UNAVAILABLE',
  'INTERNAL_ERROR',
];

/** The envelope both tools return. `ok` is true only for OK and OUTPUT_TRUNCATED. */
export interface CommandResult {
  ok: boolean;
  code: ResultCode;
  stdout: string;
  stderr: string;
  exit_code: number | null;
  duration_ms: number;
  policy_reason: string | null;
}

/** The commands section as the terminal reads it: the surface policy plus `args`. */
export interface TerminalCommandsPolicy extends SurfacePolicy {
  args: Record<string, ArgRule>;
}

/** What the terminal judges against (a file given with --policy, or the service's answer). */
export interface TerminalPolicy {
  fail_mode: FailMode;
  /** Shadow mode: a command the policy denies runs, and its line says would_block. Absent = enforce. */
  enforce?: 'enforce' | 'shadow';
  commands: TerminalCommandsPolicy;
}

/** The engine's commands-surface verdict for one binary, bound to one compiled policy. */
export type CommandDecider = (binary: string) => Verdict;

/** Builds a decider for a policy (null = no resolved policy: the engine answers no_policy). */
export type DeciderFactory = (policy: TerminalPolicy | null) => CommandDecider;

/** Where the policy comes from; called once per tool call so a reloaded policy takes effect. */
export type PolicySource = () => Promise<TerminalPolicy | null>;

/** Replaces secrets in text with [REDACTED:<kind>] markers. */
export type Redactor = (text: string) => string;

export function result(
  code: ResultCode,
  policyReason: string | null,
  extra: Partial<Pick<CommandResult, 'stdout' | 'stderr' | 'exit_code' | 'duration_ms'>> = {},
): CommandResult {
  return {
    ok: code === 'OK' || code === 'OUTPUT_TRUNCATED',
    code,
    stdout: extra.stdout ?? '',
    stderr: extra.stderr ?? '',
    exit_code: extra.exit_code ?? null,
    duration_ms: extra.duration_ms ?? 0,
    policy_reason: policyReason,
  };
}
