/**
 * The network enforcer as the service runs it (the single-subject path): the configured account's UID gets the
 * nft chain agent_<uid> redirecting to 127.0.0.1/::1:18443, and the proxy judges its connections against the
 * config's policy. A reload swaps the policy (and re-applies the chain only if its rendering changed); close
 * releases the chain, then closes the listener.
 *
 * Not registered in src/service/start.ts ENFORCERS here on purpose: doing so makes every test that starts the
 * service with `enforcers.network: true` change the HOST's firewall. The integrator registers it together with a
 * runner option that tests point at their own namespace.
 */
import { compilePolicy, decide, type CompiledPolicy } from '../../engine/index.js';
import type { LoadedConfig } from '../../config/load.js';
import type { Enforcer, EnforcerFactory, ServiceContext } from '../../service/start.js';
import { toPolicyInput } from '../../cli/check.js';
import { hostResolvers, startNetworkEnforcer, type NetworkEnforcer } from './enforcer.js';
import { dropLegacyShape, SINGLE_SUBJECT_PORT } from './nft.js';
import { hostRunner, type Runner } from './run.js';

export interface NetworkServiceOptions {
  /** Where nft runs (default: this process's namespace, which is the host's). Tests pass a netns runner. */
  runner?: Runner;
  /** The single-subject port (default 18443). */
  port?: number;
  /** resolv.conf read when network.dns_resolvers is empty. */
  resolvConf?: string;
}

function subjectOf(loaded: LoadedConfig): { uid: number; policy: CompiledPolicy } | null {
  if (!loaded.account) return null;
  return { uid: loaded.account.uid, policy: compilePolicy(toPolicyInput(loaded.config)) };
}

/** The factory for src/service/start.ts ENFORCERS. */
export function networkEnforcerFactory(opts: NetworkServiceOptions = {}): EnforcerFactory {
  const runner = opts.runner ?? hostRunner();
  const port = opts.port ?? SINGLE_SUBJECT_PORT;
  return {
    name: 'network',
    enabled: (loaded) => loaded.config.enforcers.network,
    async start(ctx: ServiceContext): Promise<Enforcer> {
      const log = ctx.logger.child({ component: 'network' });
      const cfg = ctx.loaded.config.network;
      const resolvers = hostResolvers(cfg.dns_resolvers, opts.resolvConf);
      if (resolvers.length === 0) log.warn('no DNS resolvers (network.dns_resolvers empty, none in resolv.conf)');
      await dropLegacyShape(runner, (m) => log.warn(m));
      const enf: NetworkEnforcer<CompiledPolicy> = await startNetworkEnforcer<CompiledPolicy>({
        runner,
        decide,
        log: ctx.decisions,
        resolvers,
        udp: cfg.udp,
        expectedSubjects: 1,
        warn: (m) => log.warn(m),
        proxy: { onError: (err, c) => log.warn({ uid: c.uid, stage: c.stage }, err.message) },
      });
      const first = subjectOf(ctx.loaded);
      let uid: number | null = first?.uid ?? null;
      if (first) {
        log.info({ uid: first.uid, port, outcome: await enf.setSubject({ ...first, port }) }, 'subject applied');
      } else {
        log.warn('no leashed account configured: the network enforcer has no subject');
      }
      return {
        name: 'network',
        async reload(next) {
          const n = next.loaded.config.network;
          if (n.udp !== cfg.udp || JSON.stringify(n.dns_resolvers) !== JSON.stringify(cfg.dns_resolvers))
            log.warn('network.udp / network.dns_resolvers changed: they take effect at the next restart');
          const s = subjectOf(next.loaded);
          if (uid !== null && s?.uid !== uid) await enf.releaseSubject(uid);
          if (s) {
            const outcome = await enf.setSubject({ ...s, port });
            log.info({ uid: s.uid, outcome }, 'subject reloaded');
          }
          uid = s?.uid ?? null;
        },
        close: () => enf.stop(),
      };
    },
  };
}
