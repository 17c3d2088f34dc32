import type { Config } from '../config/types.js';
import { readBindings } from './bindings.js';
import { floorOf } from './fragment.js';
import { profileLoader } from './profiles.js';
import type { PolicyState } from './resolve.js';

/**
 * What a resolution reads, from disk: the floor (the loaded config), bindings.yaml and the profiles
 * under the state directory. The service's reconcile and the CLI's dry runs (`check`, `status`)
 * both read it here, so an operator's dry run judges what the service enforces.
 */
export function loadPolicyState(config: Config, stateDir: string): PolicyState {
  return { floor: floorOf(config), bindings: readBindings(stateDir), profile: profileLoader(stateDir) };
}
