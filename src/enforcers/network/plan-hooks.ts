import { compilePolicy, type CompiledPolicy, type PolicyInput } from '../../engine/index.js';
import type { Effective } from '../../policy/fragment.js';
import type { ApplyAction, FailAction, OrphanAction } from '../../service/plan.js';
import type { NetworkEnforcer } from './enforcer.js';

/** The engine's view of one subject's resolved policy. */
export function effectiveToPolicyInput(e: Effective): PolicyInput {
  const sp = (s: { mode: PolicyInput['network']['mode']; allow: string[]; deny: string[] }) => ({
    mode: s.mode,
    allow: [...s.allow],
    deny: [...s.deny],
  });
  return {
    fail_mode: e.fail_mode,
    network: sp(e.network),
    filesystem: sp(e.filesystem),
    commands: sp(e.commands),
    tools: { ...sp(e.tools), inspect: { ...e.tools.inspect } },
  };
}

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
      const policy = compilePolicy(effectiveToPolicyInput(a.policy));
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
