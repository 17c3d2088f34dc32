import type { NetworkSubject, PolicyInput, Verdict } from '../../src/engine/types.js';
export interface NetPolicy {
  readonly mode: string;
}
export function compilePolicy(p: PolicyInput): NetPolicy;
export function decide(surface: 'network', subject: NetworkSubject, policy: NetPolicy | null): Verdict;
