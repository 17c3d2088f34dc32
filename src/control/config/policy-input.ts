import type { PolicyInput } from '../../engine/types.js';
import type { Config } from './types.js';

/**
 * The engine's view of a config or of a subject's resolved policy (the same sections): the four
 * surfaces' mode and lists, inspection, and fail_mode. Lists are copied, so the engine's input never
 * aliases a document that is edited later.
 */
export function toPolicyInput(
  c: Pick<Config, 'fail_mode' | 'network' | 'filesystem' | 'commands' | 'tools'> & { enforce?: Config['enforce'] },
): PolicyInput {
  const sp = (s: { mode: Config['network']['mode']; allow: string[]; deny: string[]; ask?: string[] }) => ({
    mode: s.mode,
    allow: [...s.allow],
    deny: [...s.deny],
    ask: [...(s.ask ?? [])],
  });
  return {
    fail_mode: c.fail_mode,
    ...(c.enforce === 'shadow' ? { enforce: 'shadow' as const } : {}),
    network: { ...sp(c.network), internal: [...c.network.internal], rebind_ok: [...c.network.rebind_ok] },
    filesystem: sp(c.filesystem),
    commands: {
      ...sp(c.commands),
      ...(c.commands.interpreters ? { interpreters: [...c.commands.interpreters] } : {}),
    },
    tools: { ...sp(c.tools), inspect: { ...c.tools.inspect } },
  };
}
