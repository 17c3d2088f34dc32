import { toPolicyInput } from '../../config/policy-input.js';
import { compilePolicy, type CompiledPolicy } from '../../engine/index.js';
import type { ApplyAction, FailAction, OrphanAction } from '../../service/plan.js';
import type { NetworkEnforcer } from './enforcer.js';

/** The network half of src/service/plan.ts PlanHooks: how a reconcile's actions reach nft and the proxy. */
export interface NetworkPlanHooks {
  apply(a: ApplyAction): Promise<void>;
  deny(a: FailAction): Promise<void>;
  orphan(a: OrphanAction): Promise<void>;
}

/**
 * apply: the subject's listener (with its compiled policy), then its chain (with its own udp/resolvers).
 * deny: no chain, listener refuses. orphan: chain kept, listener refuses.
 */
export function networkPlanHooks(enf: NetworkEnforcer<CompiledPolicy>): NetworkPlanHooks {
  return {
    async apply(a) {
      const policy = compilePolicy(toPolicyInput(a.policy));
      const n = a.policy.network;
      await enf.setSubject({
        uid: a.uid,
        port: a.port,
        policy,
        udp: n.udp,
        ...(n.dns_resolvers.length ? { resolvers: n.dns_resolvers } : {}),
      });
    },
    deny: (a) => enf.denySubject(a.uid, a.port),
    orphan: (a) => enf.orphanSubject(a.uid, a.port),
  };
}
