import { compilePolicy, decide, decideNoPolicy, type PolicyInput, type SurfacePolicy } from '../../engine/index.js';
import type { CommandDecider, TerminalPolicy } from './types.js';

const EMPTY: SurfacePolicy = { mode: 'whitelist', allow: [], deny: [] };

/**
 * The commands-surface decider over the Leash engine: the terminal's policy is compiled once per
 * policy value and every binary is judged by `decide('commands', …)`, the same function the
 * fanotify watcher's decisions are defined by. Only the commands section is compiled; the other
 * surfaces are not the terminal's to judge.
 */
export function engineDeciderFactory(): (policy: TerminalPolicy | null) => CommandDecider {
  let last: { policy: TerminalPolicy; decider: CommandDecider } | null = null;
  return (policy) => {
    if (!policy) {
      const v = decideNoPolicy('closed');
      return () => v;
    }
    if (last && last.policy === policy) return last.decider;
    // ask entries are judged (and refused: the terminal holds nothing), never dropped: in a blacklist
    // dropping them would run what a human was to be asked about.
    const { mode, allow, deny, ask } = policy.commands;
    const input: PolicyInput = {
      fail_mode: policy.fail_mode,
      network: EMPTY,
      filesystem: EMPTY,
      commands: { mode, allow, deny, ...(ask ? { ask } : {}) },
      tools: { ...EMPTY, inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' } },
    };
    const compiled = compilePolicy(input);
    const decider: CommandDecider = (binary) => decide('commands', { binary }, compiled);
    last = { policy, decider };
    return decider;
  };
}
