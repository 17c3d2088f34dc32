/**
 * The service's enforcement of every subject at once: discovery -> resolution -> plan -> the
 * watcher map, the nft chains and proxy listeners, and the tools gate's per-UID policies. SIGHUP
 * (the service's reload) runs one coalesced reconcile pass that changes only what differs.
 *
 * Order matters on the way in: a subject's watcher map entry is acknowledged before its chain goes
 * in (so a new subject is denied on the filesystem before it is redirected), and its listener is
 * open before its redirect (the network enforcer does that part).
 */
import fs from 'node:fs';
import type { Config } from '../config/types.js';
import { decide, maskSecrets, type CompiledPolicy } from '../engine/index.js';
import { createFsSupervisor, fsCmdPolicyOf, watcherMapHooks, type FsSupervisor } from '../enforcers/fs/index.js';
import {
  hostResolvers,
  startNetworkEnforcer,
  teardownNetwork,
  type NetworkEnforcer,
} from '../enforcers/network/enforcer.js';
import { dropLegacyShape } from '../enforcers/network/nft.js';
import { networkPlanHooks } from '../enforcers/network/plan-hooks.js';
import { hostRunner, type Runner } from '../enforcers/network/run.js';
import { compileGatePolicy, type CompiledGatePolicy } from '../enforcers/tools/policy.js';
import { GATE_ENGINE, gatePolicyOf } from '../enforcers/tools/service.js';
import { createToolsSocketServer, DEFAULT_TOOLS_SOCKET, type ToolsSocketServer } from '../enforcers/tools/socket.js';
import { LeashError } from '../errors.js';
import type { WatcherSubject } from '../native.js';
import type { Effective } from '../policy/fragment.js';
import { createReconciler } from './coalesce.js';
import { observe } from './observe.js';
import {
  emptyApplied,
  executePlan,
  planReconcile,
  type AppliedState,
  type ApplyAction,
  type PlanHooks,
} from './plan.js';
import type { Enforcer, EnforcerFactory, ServiceContext } from './start.js';

export interface AgentsEnforcerOptions {
  /** Where nft runs (default: this process's own network namespace). */
  runner?: Runner;
  /** /var/lib/leash (LEASH_STATE_DIR). */
  stateDir?: string;
  /** argv prefix for the watcher process (tests: a timeout). */
  watcherWrap?: string[];
  /** Extra watcher arguments. */
  watcherArgs?: string[];
  /** Gate socket path (default LEASH_TOOLS_SOCKET or /run/leash/tools.sock). */
  toolsSocket?: string;
  /** Called when the watcher died too often: the service must exit for systemd to restart it. */
  onFatal?: (e: LeashError) => void;
}

/** Everything dumped when a reconcile pass runs past 30 s: the JS stack and the native one. */
function dumpStacks(log: (msg: string) => void): void {
  try {
    const report = process.report?.getReport() as unknown as {
      javascriptStack?: { message?: string; stack?: string[] };
      nativeStack?: { symbol?: string }[];
    };
    log(
      [
        'reconcile pass running past 30 s; stacks follow',
        `javascript: ${report?.javascriptStack?.message ?? ''}`,
        ...(report?.javascriptStack?.stack ?? []).map((l) => `  ${l}`),
        'native:',
        ...(report?.nativeStack ?? []).map((f) => `  ${f.symbol ?? '?'}`),
      ].join('\n'),
    );
  } catch (e) {
    log(`reconcile pass running past 30 s; no stack report: ${(e as Error).message}`);
  }
}

function gatePolicyFor(e: Effective): CompiledGatePolicy {
  return compileGatePolicy(gatePolicyOf(e), e.fail_mode, GATE_ENGINE);
}

type EnforcerSwitches = Config['enforcers'];

/**
 * Where a subject's resolved `enforcers` differ from the enforcers this service runs (the config
 * file's, read at start): enforcers run per service, not per agent, so a profile's switch is not
 * what happens. `critical` for a surface the subject's policy enforces but nothing enforces.
 */
export function enforcerMismatches(
  account: string,
  wanted: EnforcerSwitches,
  running: EnforcerSwitches,
): { critical: boolean; surface: keyof EnforcerSwitches; message: string }[] {
  const out: { critical: boolean; surface: keyof EnforcerSwitches; message: string }[] = [];
  for (const surface of ['network', 'filesystem', 'tools'] as const) {
    if (wanted[surface] === running[surface]) continue;
    out.push(
      wanted[surface]
        ? {
            critical: true,
            surface,
            message: `${account}: its policy enforces ${surface}, but the ${surface} enforcer is off in the config file: ${surface} is NOT enforced for it`,
          }
        : {
            critical: false,
            surface,
            message: `${account}: its policy switches the ${surface} enforcer off, but enforcers run for every subject alike: ${surface} stays enforced for it`,
          },
    );
  }
  return out;
}

/** The factory registered in ENFORCERS: network, filesystem/commands and tools for every subject. */
export function agentsEnforcer(opts: AgentsEnforcerOptions = {}): EnforcerFactory {
  return {
    name: 'agents',
    enabled: (l) => l.config.enforcers.network || l.config.enforcers.filesystem || l.config.enforcers.tools,
    async start(ctx: ServiceContext): Promise<Enforcer> {
      const logger = ctx.logger.child({ component: 'reconcile' });
      const stateDir = opts.stateDir ?? process.env.LEASH_STATE_DIR ?? '/var/lib/leash';
      const runner = opts.runner ?? hostRunner();
      let current = ctx.loaded;
      const critical = (message: string, detail: Record<string, unknown>) =>
        logger.error({ severity: 'critical', ...detail }, message);

      const first = await observe({ config: () => current.config, stateDir });
      if (!first.ok) throw new LeashError('service_failed', `cannot discover subjects: ${first.message}`);
      for (const w of first.warnings) logger.warn(w);
      const initialPlan = planReconcile(emptyApplied(first.mode), first);
      const c = ctx.loaded.config;

      // The watcher starts with the whole starting map: every subject resolved, or "no policy".
      let sup: FsSupervisor | null = null;
      if (c.enforcers.filesystem) {
        const subjects = initialPlan.actions.flatMap((a): WatcherSubject[] => {
          if (a.kind === 'add' || a.kind === 'reapply')
            return [{ uid: a.uid, policy: fsCmdPolicyOf(a.policy), failMode: a.policy.fail_mode }];
          if (a.kind === 'fail' || a.kind === 'orphan') return [{ uid: a.uid, policy: null, failMode: c.fail_mode }];
          return [];
        });
        sup = createFsSupervisor({
          subjects,
          watch: c.filesystem.watch,
          decisions: c.logging.decisions,
          ...(opts.watcherWrap ? { wrap: opts.watcherWrap } : {}),
          ...(opts.watcherArgs ? { args: opts.watcherArgs } : {}),
          onFatal: (e) => {
            critical(`the watcher died too often: ${e.message}`, { code: e.code });
            opts.onFatal?.(e);
          },
          onRespawn: (i) => logger.warn({ pid: i.pid, deaths: i.deaths }, 'watcher respawned from the current map'),
        });
        await sup.ready;
      }

      let net: NetworkEnforcer<CompiledPolicy> | null = null;
      if (c.enforcers.network) {
        await dropLegacyShape(runner, (m) => logger.warn(m));
        const resolvers = hostResolvers(c.network.dns_resolvers);
        if (resolvers.length === 0)
          logger.warn('no DNS resolvers: network.dns_resolvers is empty and resolv.conf names none');
        net = await startNetworkEnforcer<CompiledPolicy>({
          runner,
          decide,
          log: ctx.decisions,
          resolvers,
          udp: c.network.udp,
          expectedSubjects: Math.max(1, first.subjects.length),
          warn: (m) => logger.warn(m),
          proxy: { onError: (err, info) => logger.warn({ uid: info.uid, stage: info.stage }, err.message) },
        });
      }

      const gate = new Map<number, CompiledGatePolicy>();
      // What `leash terminal` asks for over the same socket (op commands_policy), per subject.
      const commandsOf = new Map<number, { fail_mode: string; commands: unknown }>();
      let tools: ToolsSocketServer | null = null;
      if (c.enforcers.tools) {
        const sock = opts.toolsSocket ?? process.env.LEASH_TOOLS_SOCKET ?? DEFAULT_TOOLS_SOCKET;
        fs.mkdirSync(sock.slice(0, sock.lastIndexOf('/')) || '/', { recursive: true, mode: 0o755 });
        tools = await createToolsSocketServer({
          path: sock,
          log: ctx.decisions,
          mask: maskSecrets,
          policyForUid: (uid) => gate.get(uid) ?? null,
          commandsPolicyForUid: (uid) => commandsOf.get(uid) ?? null,
        });
      }

      const netHooks = net ? networkPlanHooks(net) : null;
      // "No policy" entries follow the floor's fail_mode as it is now, after any reload.
      const fsHooks = sup
        ? watcherMapHooks(sup, {
            get failMode() {
              return current.config.fail_mode;
            },
          })
        : null;
      // Said whenever a subject is (re)applied, so a profile change that introduces one is heard.
      const noteEnforcers = (a: { account: string; uid: number; policy: { enforcers: EnforcerSwitches } }) => {
        for (const m of enforcerMismatches(a.account, a.policy.enforcers, c.enforcers)) {
          if (m.critical) critical(m.message, { uid: a.uid, surface: m.surface });
          else logger.warn({ uid: a.uid, surface: m.surface }, m.message);
        }
      };
      // Applies subjects: every watcher map entry first (each acknowledged), then every listener and
      // one nft transaction for all chains, then the gate policies. A gate policy that does not
      // compile, a map entry or a chain that will not go in fails that subject alone.
      const applyAll = async (actions: ApplyAction[]): Promise<Map<number, Error>> => {
        const errors = new Map<number, Error>();
        const gates = new Map<number, CompiledGatePolicy | null>();
        const mapped: ApplyAction[] = [];
        for (const a of actions) {
          noteEnforcers(a);
          try {
            gates.set(a.uid, c.enforcers.tools ? gatePolicyFor(a.policy) : null);
            if (fsHooks) await fsHooks.apply(a);
            mapped.push(a);
          } catch (e) {
            errors.set(a.uid, e as Error);
          }
        }
        if (netHooks) for (const [uid, e] of await netHooks.applyMany(mapped)) errors.set(uid, e);
        for (const a of mapped) {
          if (errors.has(a.uid)) continue;
          const g = gates.get(a.uid);
          if (g) gate.set(a.uid, g);
          commandsOf.set(a.uid, { fail_mode: a.policy.fail_mode, commands: a.policy.commands });
        }
        return errors;
      };
      const hooks: PlanHooks = {
        async apply(a) {
          const e = (await applyAll([a])).get(a.uid);
          if (e) throw e; // executePlan denies it
        },
        applyBatch: applyAll,
        async deny(a) {
          gate.delete(a.uid);
          commandsOf.delete(a.uid);
          if (fsHooks) await fsHooks.deny(a);
          if (netHooks) await netHooks.deny(a);
        },
        async orphan(a) {
          gate.delete(a.uid);
          commandsOf.delete(a.uid);
          if (fsHooks) await fsHooks.orphan(a);
          if (netHooks) await netHooks.orphan(a);
        },
        critical,
      };

      const report = (what: string, plan: ReturnType<typeof planReconcile>, applied: AppliedState) => {
        const counts: Record<string, number> = {};
        for (const a of plan.actions) counts[a.kind] = (counts[a.kind] ?? 0) + 1;
        logger.info({ mode: applied.mode, subjects: applied.subjects.size, ...counts }, what);
      };

      let prev: AppliedState;
      try {
        const done = await executePlan(initialPlan, hooks);
        prev = done.state;
        report('subjects applied', initialPlan, prev);
      } catch (e) {
        await net?.stop().catch(() => {});
        await tools?.close().catch(() => {});
        await sup?.close().catch(() => {});
        throw e;
      }

      const reconciler = createReconciler({
        pass: async () => {
          const obs = await observe({ config: () => current.config, stateDir });
          if (obs.ok) for (const w of obs.warnings) logger.warn(w);
          const plan = planReconcile(prev, obs);
          const done = await executePlan(plan, hooks);
          prev = done.state;
          report('reconciled', plan, prev);
        },
        onSlow: () => dumpStacks((m) => logger.error({ severity: 'critical' }, m)),
        onError: (e) => critical(`reconcile pass failed: ${(e as Error).message}`, {}),
      });

      return {
        name: 'agents',
        async reload(next) {
          current = next.loaded;
          await reconciler.trigger();
        },
        async reopenLogs() {
          await sup?.reopenLog();
        },
        async close() {
          await reconciler.close();
          // Release chains before the listeners and the watcher go: no UID is left redirected to nothing.
          await net?.stop().catch((e: unknown) => logger.error({ err: e }, 'network release failed'));
          if (net) {
            // Whatever the enforcer's own bookkeeping missed (a pass cut short, an apply that failed half-way):
            // a stop leaves no UID redirected, the same sweep as ExecStopPost=leash teardown.
            const left = await teardownNetwork(runner).catch((e: unknown) => {
              logger.error({ err: e }, 'network teardown failed');
              return [] as number[];
            });
            if (left.length) logger.warn({ uids: left }, 'released chains the enforcer no longer tracked');
          }
          await tools?.close().catch(() => {});
          await sup?.close().catch(() => {});
        },
      };
    },
  };
}
