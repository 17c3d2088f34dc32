import { parseStrictYaml, readPolicyFile, strictProblems } from '../../formats/yaml.js';
import { LeashError } from '../../errors.js';
import { commandEntryProblem } from '../../engine/index.js';
import type { TerminalPolicy } from './types.js';

/** A policy that failed validation (config_invalid) or cannot be read (config_missing); `problems` are `path: message` lines. */
export class TerminalPolicyError extends LeashError {
  constructor(
    readonly problems: string[],
    readonly kind: 'missing' | 'invalid',
  ) {
    super(kind === 'missing' ? 'config_missing' : 'config_invalid', problems.join('\n'));
  }
}

const COMMANDS_KEYS = new Set(['mode', 'allow', 'deny', 'ask', 'args']);

/**
 * The engine's command entry grammar. An entry that can never match is refused here rather than
 * reported: the terminal's own policy file has no other reader to warn, and an inert deny blocks
 * nothing.
 */
function entryProblem(entry: string): string | null {
  return commandEntryProblem(entry)?.message ?? null;
}

function stringList(v: unknown, at: string, problems: string[], check = true): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) {
    problems.push(`${at}: must be a list of strings`);
    return [];
  }
  const out: string[] = [];
  v.forEach((e, i) => {
    if (typeof e !== 'string') return problems.push(`${at}[${i}]: must be a string`);
    const p = check ? entryProblem(e) : null;
    if (p) return problems.push(`${at}[${i}]: ${p} ('${e}')`);
    out.push(e);
  });
  return out;
}

/**
 * Validates the parts of a Leash config or profile the terminal reads: `fail_mode` and the
 * `commands` section, including `commands.args`. Other sections are left to their own loaders.
 * Unknown keys under `commands` are refused: a misspelt `deny` would otherwise deny nothing.
 */
export function validateTerminalPolicy(doc: unknown): TerminalPolicy {
  const problems: string[] = [];
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc))
    throw new TerminalPolicyError(['(root): must be a mapping'], 'invalid');
  const d = doc as Record<string, unknown>;
  const failMode = d.fail_mode ?? 'closed';
  if (failMode !== 'closed' && failMode !== 'open') problems.push('fail_mode: must be closed or open');
  const enforce = d.enforce ?? 'enforce';
  if (enforce !== 'enforce' && enforce !== 'shadow') problems.push('enforce: must be enforce or shadow');
  const c = d.commands;
  if (c === undefined || c === null || typeof c !== 'object' || Array.isArray(c)) {
    throw new TerminalPolicyError(
      [...problems, 'commands: required, a mapping with mode, allow, deny and optional args'],
      'invalid',
    );
  }
  const cmd = c as Record<string, unknown>;
  for (const k of Object.keys(cmd)) if (!COMMANDS_KEYS.has(k)) problems.push(`commands.${k}: unknown key`);
  const mode = cmd.mode ?? 'whitelist';
  if (mode !== 'whitelist' && mode !== 'blacklist') problems.push('commands.mode: must be whitelist or blacklist');
  const allow = stringList(cmd.allow, 'commands.allow', problems);
  const deny = stringList(cmd.deny, 'commands.deny', problems);
  const ask = cmd.ask === undefined ? undefined : stringList(cmd.ask, 'commands.ask', problems);
  const args: TerminalPolicy['commands']['args'] = {};
  if (cmd.args !== undefined) {
    if (cmd.args === null || typeof cmd.args !== 'object' || Array.isArray(cmd.args)) {
      problems.push('commands.args: must be a mapping of command entry to { deny_args, reason? }');
    } else {
      for (const [key, rule] of Object.entries(cmd.args as Record<string, unknown>)) {
        const at = `commands.args.${key}`;
        const kp = entryProblem(key);
        if (kp) problems.push(`${at}: ${kp}`);
        if (rule === null || typeof rule !== 'object' || Array.isArray(rule)) {
          problems.push(`${at}: must be a mapping with deny_args`);
          continue;
        }
        const r = rule as Record<string, unknown>;
        for (const k of Object.keys(r))
          if (k !== 'deny_args' && k !== 'reason') problems.push(`${at}.${k}: unknown key`);
        const patterns = stringList(r.deny_args, `${at}.deny_args`, problems, false);
        patterns.forEach((p, i) => {
          if (p.trim().length === 0) problems.push(`${at}.deny_args[${i}]: empty pattern`);
        });
        if (r.deny_args === undefined) problems.push(`${at}.deny_args: required`);
        if (r.reason !== undefined && typeof r.reason !== 'string') problems.push(`${at}.reason: must be a string`);
        args[key] = { deny_args: patterns, ...(typeof r.reason === 'string' ? { reason: r.reason } : {}) };
      }
    }
  }
  if (problems.length > 0) throw new TerminalPolicyError(problems, 'invalid');
  return {
    fail_mode: failMode as TerminalPolicy['fail_mode'],
    ...(enforce === 'shadow' ? { enforce: 'shadow' as const } : {}),
    commands: { mode: mode as TerminalPolicy['commands']['mode'], allow, deny, ...(ask ? { ask } : {}), args },
  };
}

/** Reads and validates a policy file. A missing file and an invalid file are different errors. */
export function loadTerminalPolicy(file: string): TerminalPolicy {
  // The strict reader (src/formats/yaml.ts): no anchors, aliases, merge keys or tags, UTF-8,
  // bounded sizes, a duplicate key refused.
  let doc: unknown;
  try {
    doc = parseStrictYaml(readPolicyFile(file), file, { uniqueKeys: true }).js;
  } catch (e) {
    if (!(e instanceof LeashError)) throw e;
    const kind = e.code === 'config_missing' || e.code === 'config_unreadable' ? 'missing' : 'invalid';
    throw new TerminalPolicyError(strictProblems(e, file), kind);
  }
  return validateTerminalPolicy(doc);
}
