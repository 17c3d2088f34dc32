import type { Config } from '../config/types.js';
import { readBindings, type BindingsCache } from './bindings.js';
import { floorOf } from './fragment.js';
import { pendingState, readPending } from './pending.js';
import { profileLoader, type ParseCache, type ProfileStatus } from './profiles.js';
import type { PolicyState } from './resolve.js';

/** What a long-lived reader keeps between reads so that unchanged files are not parsed again (see ParseCache). */
export interface StateCache {
  /** The profiles parsed by the last read (a profile no read asks for any more is dropped with it). */
  profiles: Map<string, { text: string; status: ProfileStatus }>;
  bindings: BindingsCache;
}

export function stateCache(): StateCache {
  return { profiles: new Map(), bindings: {} };
}

/** This read's profile cache: looks in the last read's, keeps what this one uses. */
function nextGeneration(cache: StateCache): ParseCache {
  const prev = cache.profiles;
  const cur = new Map<string, { text: string; status: ProfileStatus }>();
  cache.profiles = cur;
  return { get: (f) => cur.get(f) ?? prev.get(f), set: (f, v) => cur.set(f, v) };
}

/**
 * What a resolution reads, from disk: the floor (the loaded config), bindings.yaml and the profiles
 * under the state directory. The service's reconcile and the CLI's dry runs (`check`, `status`)
 * both read it here, so an operator's dry run judges what the service enforces. While a `leash apply`
 * commit record exists (pending.ts), the state is the one it holds: the target, never a mix.
 */
export function loadPolicyState(config: Config, stateDir: string, cache?: StateCache): PolicyState {
  const pending = readPending(stateDir);
  if (pending) return { floor: floorOf(config), ...pendingState(stateDir, pending) };
  return {
    floor: floorOf(config),
    bindings: readBindings(stateDir, cache?.bindings),
    profile: profileLoader(stateDir, cache ? nextGeneration(cache) : undefined),
  };
}
