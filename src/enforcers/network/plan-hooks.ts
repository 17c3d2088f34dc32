import { toPolicyInput } from '../../config/policy-input.js';
import { compilePolicy, type CompiledPolicy } from '../../engine/index.js';
import type { ApplyAction, FailAction, OrphanAction } from '../../service/plan.js';
import type { NetworkEnforcer } from './enforcer.js';

/** The network half of src/service/plan.ts PlanHooks: how a reconcile's actions reach nft and the proxy. */
export interface NetworkPlanHooks {
  /** Applies subjects (their listeners, then one nft transaction for their chains); the error of each that failed. */
  applyMany(actions: ApplyAction[]): Promise<Map<number, Error>>;
  deny(a: FailAction): Promise<void>;
  orphan(a: OrphanAction): Promise<void>;
}

/**
 * applyMany: each subject's listener (with its compiled policy), then its chain (with its own udp/resolvers).
 * deny: no chain, listener refuses. orphan: chain kept, listener refuses.
 */
export function networkPlanHooks(enf: NetworkEnforcer<CompiledPolicy>): NetworkPlanHooks {
  const spec = (a: ApplyAction) => {
    const n = a.policy.network;
    return {
      uid: a.uid,
      port: a.port,
      policy: compilePolicy(toPolicyInput(a.policy)),
      udp: n.udp,
      ...(n.dns_resolvers.length ? { resolvers: n.dns_resolvers } : {}),
    };
  };
  return {
    async applyMany(actions) {
      const errors = new Map<number, Error>();
      const specs = [];
      for (const a of actions) {
        try {
          specs.push(spec(a));
        } catch (e) {
          errors.set(a.uid, e as Error);
        }
      }
      for (const [uid, r] of await enf.setSubjects(specs)) if (r instanceof Error) errors.set(uid, r);
      return errors;
    },
    deny: (a) => enf.denySubject(a.uid, a.port),
    orphan: (a) => enf.orphanSubject(a.uid, a.port),
  };
}
