/**
 * The network's start in the service: the enforcer (src/dataplane/network/enforcer.ts, the surface itself) made from
 * the config, the engine's verdicts and the service's logs, driven with execute.ts's networkSubjectOf.
 */
import type { Config } from '../../config/types.js';
import { decide, decideDnsAnswer, decideDnsName, type CompiledPolicy } from '../../../engine/index.js';
import { hostResolvers, startNetworkEnforcer } from '../../../dataplane/network/enforcer.js';
import { dropLegacyShape } from '../../../dataplane/network/nft/apply.js';
import { onKernelReadFallback } from '../../../dataplane/network/nft/read.js';
import type { Runner } from '../../../dataplane/network/nft/run.js';
import { LeashError } from '../../../errors.js';
import type { DecisionLog } from '../../../log/decisions.js';
import type { Logger } from '../../../log/logger.js';
import { drive, networkSubjectOf, type Driven } from '../execute.js';
import type { Asker } from '../../../engine/approval.js';

export interface NetworkSurfaceOptions {
  config: Config;
  runner: Runner;
  decisions: DecisionLog;
  logger: Logger;
  /** How many subjects the first plan holds (the iptables fallback refuses more than one). */
  expectedSubjects: number;
  /** The floor's fail_mode at start: what a listener without a policy answers under until the next pass pushes it. */
  failMode: 'closed' | 'open';
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

export async function startNetworkSurface(o: NetworkSurfaceOptions): Promise<Driven> {
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
    error: (err, m) => logger.error({ err }, m),
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
  return drive(net, networkSubjectOf);
}
