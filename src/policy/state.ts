import type { Config } from '../config/types.js';
import { readBindings } from './bindings.js';
import { floorOf } from './fragment.js';
import { pendingState, readPending } from './pending.js';
import { profileLoader } from './profiles.js';
import type { PolicyState } from './resolve.js';

/**
 * What a resolution reads, from disk: the floor (the loaded config), bindings.yaml and the profiles
 * under the state directory. The service's reconcile and the CLI's dry runs (`check`, `status`)
 * both read it here, so an operator's dry run judges what the service enforces. While a `leash apply`
 * commit record exists (pending.ts), the state is the one it holds: the target, never a mix.
 */
export function loadPolicyState(config: Config, stateDir: string): PolicyState {
  const pending = readPending(stateDir);
  if (pending) return { floor: floorOf(config), ...pendingState(stateDir, pending) };
  return { floor: floorOf(config), bindings: readBindings(stateDir), profile: profileLoader(stateDir) };
}
