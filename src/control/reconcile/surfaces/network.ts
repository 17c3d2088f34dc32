/**
 * The network in the service: nft chains per UID and one proxy listener per UID (src/dataplane/network). apply
 * opens each subject's listener with its compiled policy, then puts every chain in with one nft transaction; deny
 * (a subject that cannot be resolved) keeps or puts in its chain behind a listener that refuses with `no_policy`
 * (lets through under fail_mode open); orphan keeps the chain and refuses the same way. close releases every chain
 * before the listeners go, so no UID is left redirected to nothing.
 */
import type { Config } from '../../config/types.js';
import { toPolicyInput } from '../../config/policy-input.js';
import { compilePolicy, decide, decideDnsAnswer, decideDnsName, type CompiledPolicy } from '../../../engine/index.js';
import {
  hostResolvers,
  startNetworkEnforcer,
  teardownNetwork,
  type NetworkEnforcer,
  type NetworkSubjectSpec,
} from '../../../dataplane/network/enforcer.js';
import { dropLegacyShape } from '../../../dataplane/network/nft/apply.js';
import { onKernelReadFallback } from '../../../dataplane/network/nft/read.js';
import type { Runner } from '../../../dataplane/network/nft/run.js';
import { LeashError } from '../../../errors.js';
import type { DecisionLog } from '../../../log/decisions.js';
import type { Logger } from '../../../log/logger.js';
import { effectiveEch } from '../../policy/loosen.js';
import type { ApplyAction } from '../plan.js';
import { enforcedSet, type Surface } from './contract.js';
import type { Asker } from '../../../engine/approval.js';

/** What the network enforcer takes for one subject: its listener's compiled policy and its chain's settings. */
function specOf(a: ApplyAction, compiled: Map<string, CompiledPolicy>): NetworkSubjectSpec<CompiledPolicy> {
  const n = a.policy.network;
  // Subjects whose resolved policies are equal (the hash of the canonical policy: agents bound to one profile)
  // share one compiled policy, which the engine only reads.
  let policy = compiled.get(a.hash);
  if (!policy) compiled.set(a.hash, (policy = compilePolicy(toPolicyInput(a.policy))));
  return {
    uid: a.uid,
    port: a.port,
    policy,
    udp: n.udp,
    ech: effectiveEch(n),
    ...(n.dns_resolvers.length ? { resolvers: n.dns_resolvers } : {}),
  };
}

/**
 * The network surface over an enforcer already running. apply: each subject's listener (with its compiled policy),
 * then one nft transaction for their chains (each with its own udp/resolvers). deny: chain kept or put in, listener
 * without a policy. orphan: chain kept, listener without a policy. close: the enforcer's chains and listeners, then a
 * sweep of whatever its bookkeeping missed.
 */
export function networkSurface(net: NetworkEnforcer<CompiledPolicy>, runner: Runner, logger: Logger): Surface {
  const { enforced, ...withdraw } = enforcedSet('network', {
    deny: (a) => net.denySubject(a.uid, a.port),
    orphan: (a) => net.orphanSubject(a.uid, a.port),
  });
  return {
    surface: 'network',
    async apply(actions) {
      const errors = new Map<number, Error>();
      const specs: NetworkSubjectSpec<CompiledPolicy>[] = [];
      const compiled = new Map<string, CompiledPolicy>();
      for (const a of actions) {
        try {
          specs.push(specOf(a, compiled));
        } catch (e) {
          errors.set(a.uid, e as Error);
        }
      }
      for (const [uid, r] of await net.setSubjects(specs)) if (r instanceof Error) errors.set(uid, r);
      for (const a of actions) if (!errors.has(a.uid)) enforced.add(a.uid);
      return errors;
    },
    ...withdraw,
    async close() {
      // Release chains before the listeners go: no UID is left redirected to nothing.
      await net.stop().catch((e: unknown) => logger.error({ err: e }, 'network release failed'));
      // Whatever the enforcer's own bookkeeping missed (a pass cut short, an apply that failed half-way):
      // a stop leaves no UID redirected, the same sweep as ExecStopPost=leash teardown.
      const left = await teardownNetwork(runner).catch((e: unknown) => {
        logger.error({ err: e }, 'network teardown failed');
        return [] as number[];
      });
      if (left.length) logger.warn({ uids: left }, 'released chains the enforcer no longer tracked');
    },
  };
}

export interface NetworkSurfaceOptions {
  config: Config;
  runner: Runner;
  decisions: DecisionLog;
  logger: Logger;
  /** How many subjects the first plan holds (the iptables fallback refuses more than one). */
  expectedSubjects: number;
  /** The floor's fail_mode as it is now (after any reload): what a listener without a policy answers under. */
  failMode: () => 'closed' | 'open';
  /** The proxy's own operational log (component `proxy`); default `logger`. */
  proxyLogger?: Logger;
  /** The approvals queue: connections the engine asks about are held for it. */
  ask?: Asker;
  /** Stage timings for the metrics (proxy_setup, dns). */
  observe?: (stage: 'proxy_setup' | 'dns', seconds: number) => void;
}

/**
 * The proxy's connection caps from the environment (the unit sets none: the defaults fit its LimitNOFILE):
 * LEASH_PROXY_MAX_CONNECTIONS (all subjects) and LEASH_PROXY_MAX_PER_AGENT.
 */
export function proxyLimits(env: NodeJS.ProcessEnv): { maxConnections?: number; maxPerSubject?: number } {
  const n = (v: string | undefined, name: string): number | undefined => {
    if (v === undefined || v === '') return undefined;
    const x = Number(v);
    if (!Number.isInteger(x) || x < 1)
      throw new LeashError('config_invalid', `${name} must be a positive integer, not ${JSON.stringify(v)}`);
    return x;
  };
  const maxConnections = n(env.LEASH_PROXY_MAX_CONNECTIONS, 'LEASH_PROXY_MAX_CONNECTIONS');
  const maxPerSubject = n(env.LEASH_PROXY_MAX_PER_AGENT, 'LEASH_PROXY_MAX_PER_AGENT');
  return {
    ...(maxConnections !== undefined ? { maxConnections } : {}),
    ...(maxPerSubject !== undefined ? { maxPerSubject } : {}),
  };
}

export async function startNetworkSurface(o: NetworkSurfaceOptions): Promise<Surface> {
  const { config: c, runner, logger } = o;
  const proxyLog = o.proxyLogger ?? logger;
  onKernelReadFallback((why) =>
    logger.warn(
      { why },
      `nft state read through the nft program, not the kernel (${why}): slower reconciles, same answer`,
    ),
  );
  await dropLegacyShape(runner, (m) => logger.warn(m));
  const resolvers = hostResolvers(c.network.dns_resolvers);
  if (resolvers.length === 0)
    logger.warn('no DNS resolvers: network.dns_resolvers is empty and resolv.conf names none');
  const net = await startNetworkEnforcer<CompiledPolicy>({
    runner,
    decide,
    decideDns: decideDnsName,
    decideDnsAnswer,
    log: o.decisions,
    resolvers,
    udp: c.network.udp,
    expectedSubjects: o.expectedSubjects,
    warn: (m) => logger.warn(m),
    dns: {
      refuse: c.network.dns_refuse,
      failMode: o.failMode,
      onError: (err, info) => logger.warn({ uid: info.uid, stage: info.stage }, err.message),
      ...(o.observe ? { onAnswer: (s: number) => o.observe!('dns', s) } : {}),
    },
    proxy: {
      // Under its own component, rate-limited per stage and code (a failing upstream is one line per window,
      // with the count of the ones held back).
      onError: (err, info) =>
        proxyLog.warn(
          {
            uid: info.uid,
            stage: info.stage,
            code: (err as NodeJS.ErrnoException).code,
            ...(info.suppressed ? { suppressed: info.suppressed } : {}),
          },
          info.suppressed ? `${err.message} (and ${info.suppressed} more like it in the window)` : err.message,
        ),
      failMode: o.failMode,
      ...(o.ask ? { ask: o.ask } : {}),
      ...proxyLimits(process.env),
      ...(o.observe ? { onSetup: (s: number) => o.observe!('proxy_setup', s) } : {}),
    },
  });
  return networkSurface(net, runner, logger);
}
