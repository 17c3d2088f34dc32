import type { NetworkSurfacePolicy, PolicyInput, SurfacePolicy } from '../../src/engine/types.js';

/** A full PolicyInput whose network section is `network`; other surfaces permissive (they are not under test here). */
export function netPolicy(network: Partial<NetworkSurfacePolicy>): PolicyInput {
  const open: SurfacePolicy = { mode: 'blacklist', allow: [], deny: [] };
  return {
    fail_mode: 'closed',
    network: { mode: 'whitelist', allow: [], deny: [], ...network },
    filesystem: open,
    commands: open,
    tools: { ...open, inspect: { secrets: 'log', pii: 'log', priv_esc: 'log' } },
  };
}
