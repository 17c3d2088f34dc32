/**
 * Interim commands-surface decider, used only until src/engine (branch engine) is merged; it
 * implements the BRIEF's commands semantics (deny wins in both modes; whitelist passes only allow
 * entries; blacklist passes unless a deny entry matches; null policy = no_policy by fail mode).
 * The integrator replaces `localDeciderFactory` with one over compilePolicy/decide.
 */
import type { Verdict } from '../../engine/types.js';
import { commandEntryMatches } from './match.js';
import type { CommandDecider, TerminalPolicy } from './types.js';

export function localDeciderFactory(policy: TerminalPolicy | null): CommandDecider {
  return (binary: string): Verdict => {
    if (!policy) return { action: 'block', reason: 'no_policy', source: 'fail_mode', rule: null };
    const c = policy.commands;
    const deny = c.deny.find((e) => commandEntryMatches(e, binary));
    if (deny !== undefined) return { action: 'block', reason: 'deny_entry', source: 'deny', rule: deny };
    if (c.mode === 'blacklist') return { action: 'allow', reason: 'mode_allow', source: 'mode', rule: null };
    const allow = c.allow.find((e) => commandEntryMatches(e, binary));
    if (allow !== undefined) return { action: 'allow', reason: 'allow_entry', source: 'allow', rule: allow };
    return { action: 'block', reason: 'not_allowed', source: 'mode', rule: null };
  };
}
