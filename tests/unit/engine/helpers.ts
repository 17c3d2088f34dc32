import type { PolicyInput, SurfacePolicy } from '../../../src/engine/index.js';

const empty = (): SurfacePolicy => ({ mode: 'whitelist', allow: [], deny: [] });

/** A whole policy with every surface empty (whitelist), overridden per surface. */
export function makePolicy(
  over: Partial<Omit<PolicyInput, 'tools'>> & { tools?: Partial<PolicyInput['tools']> } = {},
): PolicyInput {
  return {
    fail_mode: over.fail_mode ?? 'closed',
    network: over.network ?? empty(),
    filesystem: over.filesystem ?? empty(),
    commands: over.commands ?? empty(),
    tools: { ...empty(), inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' }, ...over.tools },
  };
}
