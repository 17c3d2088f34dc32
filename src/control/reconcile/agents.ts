/**
 * The service's enforcement of every subject at once: discovery -> resolution -> plan -> the
 * watcher map, the nft chains and proxy listeners, and the tools gate's per-UID policies. SIGHUP
 * (the service's reload) runs one coalesced reconcile pass that changes only what differs.
 *
 * Order matters on the way in: a subject's watcher map entry is acknowledged before its chain goes
 * in (so a new subject is denied on the filesystem before it is redirected), and its listener is
 * open before its redirect (the network enforcer does that part).
 */
import type { Config } from '../config/types.js';
import { hostRunner, type Runner } from '../../dataplane/network/nft/run.js';
import { releaseMemory } from '../../dataplane/network/proxy/settle.js';
import { LeashError } from '../../errors.js';
import { createReconciler } from './coalesce.js';
import { observe, observeCache, warmObserveCache } from './observe.js';
import {
  emptyApplied,
  executePlan,
  planReconcile,
  type AppliedState,
  type ApplyAction,
  type PlanHooks,
} from './plan.js';
import type { MetricFamily } from '../../metrics/metrics.js';
import type { Enforcer, EnforcerFactory, ServiceContext } from '../daemon/start.js';
import type { ReloadProblem } from './generation.js';
import { applySideBySide, type SurfaceAdapter, type SurfaceName } from './surfaces/contract.js';
import { startNetworkSurface } from './surfaces/network.js';
import { startToolsSurface } from './surfaces/tools.js';
import { startWatcherSurface } from './surfaces/watcher.js';
import { approvalFamilies, startApprovals, type Approvals } from '../approvals/service.js';

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
  /** Approvals socket path (default LEASH_APPROVALS_SOCKET or /run/leash/approvals.sock). */
  approvalsSocket?: string;
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

/** The service's enforcer: network, filesystem/commands and tools for every subject, one adapter each. */
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

      // Kept across passes: each pass re-reads every file but parses and resolves only what changed.
      const cache = observeCache();
      const first = await observe({ config: () => current.config, stateDir, cache });
      if (!first.ok) throw new LeashError('service_failed', `cannot discover subjects: ${first.message}`);
      for (const w of first.warnings) logger.warn(w);
      const initialPlan = planReconcile(emptyApplied(first.mode), first);
      const c = ctx.loaded.config;

      // The surfaces, in the order a subject is applied: its watcher map entry (acknowledged) first, so a new
      // subject is denied on the filesystem before it is redirected; then its listener and chain; then its gate
      // policy. Each surface is an adapter (surfaces/contract.ts).
      let triggerReconcile: () => void = () => {};
      const approvals: Approvals = await startApprovals({
        config: () => current.config,
        stateDir,
        decisions: ctx.decisions,
        logger: ctx.logger.child({ component: 'approvals' }),
        subjects: first.subjects.map((s) => s.subject),
        ...(opts.approvalsSocket ? { socket: opts.approvalsSocket } : {}),
        onPersisted: () => triggerReconcile(),
      });

      const surfaces: SurfaceAdapter[] = [];
      const inOrder = (names: SurfaceName[]) => names.flatMap((n) => surfaces.filter((s) => s.surface === n));
      // Closing releases the chains first: no UID is left redirected to a listener that is gone.
      const closeAll = async () => {
        // Pending requests first: each held action is answered with a block (approval_cancelled), never an allow.
        await approvals.close().catch((e: unknown) => logger.error({ err: e }, 'approvals close failed'));
        for (const s of inOrder(['network', 'tools', 'filesystem']))
          await s.close().catch((e: unknown) => logger.error({ err: e, surface: s.surface }, 'surface close failed'));
      };
      try {
        if (c.enforcers.filesystem)
          surfaces.push(
            await startWatcherSurface({
              config: c,
              initial: initialPlan.actions,
              // "No policy" entries follow the floor's fail_mode as it is now, after any reload.
              failMode: () => current.config.fail_mode,
              ...(opts.watcherWrap ? { wrap: opts.watcherWrap } : {}),
              ...(opts.watcherArgs ? { args: opts.watcherArgs } : {}),
              onFatal: (e) => {
                critical(`the watcher died too often: ${e.message}`, { code: e.code });
                opts.onFatal?.(e);
              },
              onRespawn: (i) =>
                logger.warn(
                  { pid: i.pid, deaths: i.deaths, takeover: i.takeover },
                  i.takeover
                    ? 'watcher died: its standby took over the group'
                    : 'watcher respawned from the current map',
                ),
              onStandbyUnavailable: (why) => logger.warn({}, `${why}: a watcher death reopens the respawn window`),
              ask: approvals.queue.ask,
            }),
          );
        if (c.enforcers.network)
          surfaces.push(
            await startNetworkSurface({
              config: c,
              runner,
              decisions: ctx.decisions,
              logger,
              expectedSubjects: Math.max(1, first.subjects.length),
              failMode: () => current.config.fail_mode,
              proxyLogger: ctx.logger.child({ component: 'proxy' }),
              ask: approvals.queue.ask,
              ...(ctx.metrics ? { observe: (stage, s) => ctx.metrics!.observe(stage, s) } : {}),
            }),
          );
        if (c.enforcers.tools)
          surfaces.push(
            await startToolsSurface({
              config: c,
              decisions: ctx.decisions,
              ...(opts.toolsSocket ? { socket: opts.toolsSocket } : {}),
              ask: approvals.queue.ask,
              logger: ctx.logger.child({ component: 'tools' }),
              ...(ctx.metrics ? { onJudge: (s: number) => ctx.metrics!.observe('tools_judge', s) } : {}),
            }),
          );
      } catch (e) {
        await closeAll();
        throw e;
      }
      // A withdrawn subject loses its gate policy first, then its map entry, then its chain.
      const withdrawOrder = inOrder(['tools', 'filesystem', 'network']);

      // Said whenever a subject is (re)applied, so a profile change that introduces one is heard.
      const noteEnforcers = (a: { account: string; uid: number; policy: { enforcers: EnforcerSwitches } }) => {
        for (const m of enforcerMismatches(a.account, a.policy.enforcers, c.enforcers)) {
          if (m.critical) critical(m.message, { uid: a.uid, surface: m.surface });
          else logger.warn({ uid: a.uid, surface: m.surface }, m.message);
        }
      };
      // Applies subjects: every surface prepares each subject (a gate policy that does not compile fails it
      // alone, with nothing applied), then the surfaces apply those still standing side by side (applySideBySide):
      // the watcher map entries (each acknowledged), every listener and one nft transaction for all chains, the gate.
      /** Time each surface spent applying in the current pass (ms), for the reconciled line. */
      let surfaceMs: Record<string, number> = {};
      const applyAll = async (actions: ApplyAction[]): Promise<Map<number, Error>> => {
        const errors = new Map<number, Error>();
        const standing: ApplyAction[] = [];
        for (const a of actions) {
          noteEnforcers(a);
          try {
            for (const s of surfaces) s.prepare?.(a);
            standing.push(a);
          } catch (e) {
            errors.set(a.uid, e as Error);
          }
        }
        for (const [uid, e] of await applySideBySide(surfaces, standing, surfaceMs))
          if (!errors.has(uid)) errors.set(uid, e);
        // A subject's policy changed: its session approvals end (docs/approvals.md).
        for (const a of actions) approvals.queue.endSessions(a.uid);
        return errors;
      };
      const hooks: PlanHooks = {
        async apply(a) {
          const e = (await applyAll([a])).get(a.uid);
          if (e) throw e; // executePlan denies it
        },
        applyBatch: applyAll,
        async deny(a) {
          approvals.forget(a.uid);
          for (const s of withdrawOrder) await s.deny(a);
        },
        async orphan(a) {
          approvals.forget(a.uid);
          for (const s of withdrawOrder) await s.orphan(a);
        },
        critical,
      };

      const report = (
        what: string,
        plan: ReturnType<typeof planReconcile>,
        applied: AppliedState,
        ms?: Record<string, number>,
      ) => {
        const counts: Record<string, number> = {};
        for (const a of plan.actions) counts[a.kind] = (counts[a.kind] ?? 0) + 1;
        logger.info({ mode: applied.mode, subjects: applied.subjects.size, ...counts, ...(ms ? { ms } : {}) }, what);
      };

      // Applying many subjects at once (a start, a pass adding a fleet's accounts) parses and compiles every policy:
      // the heap and glibc's arenas grow for it and keep the pages. One memory-reducing collection and malloc_trim
      // afterwards (settle.ts) bring RSS back to what the subjects hold, off the pass's own time.
      const giveBack = (plan: ReturnType<typeof planReconcile>) => {
        const heavy = plan.actions.filter((a) => a.kind === 'add' || a.kind === 'reapply').length;
        if (heavy >= 64)
          setImmediate(() => {
            try {
              releaseMemory();
            } catch {
              // no addon (a build without it): memory stays where the collector leaves it
            }
          });
      };

      let prev: AppliedState;
      try {
        const done = await executePlan(initialPlan, hooks);
        prev = done.state;
        report('subjects applied', initialPlan, prev);
        giveBack(initialPlan);
        // Once the start is in force, off its path: what the next pass would otherwise make first.
        setTimeout(() => warmObserveCache(cache), 1000).unref();
      } catch (e) {
        await closeAll();
        throw e;
      }

      // Scrape-time figures: subjects by state, and what each surface's own process counts.
      const dropCollector = ctx.metrics?.collect(async (): Promise<MetricFamily[]> => {
        const byState: Record<string, number> = { active: 0, failed: 0, orphaned: 0 };
        for (const sub of prev.subjects.values()) byState[sub.state] = (byState[sub.state] ?? 0) + 1;
        const out: MetricFamily[] = [
          {
            name: 'leash_subjects',
            help: 'subjects by state: active (policy enforced), failed (held fail-closed), orphaned',
            type: 'gauge',
            values: Object.entries(byState).map(([state, value]) => ({ value, labels: { state } })),
          },
        ];
        out.push(...approvalFamilies(approvals.queue.counts()));
        for (const s of surfaces) if (s.families) out.push(...(await s.families()));
        return out;
      });

      const reconciler = createReconciler<ReloadProblem[]>({
        pass: async () => {
          const t0 = performance.now();
          surfaceMs = {};
          const obs = await observe({ config: () => current.config, stateDir, cache });
          const t1 = performance.now();
          if (obs.ok) for (const w of obs.warnings) logger.warn(w);
          if (obs.ok) approvals.setSubjects(obs.subjects.map((s) => s.subject));
          const plan = planReconcile(prev, obs);
          const t2 = performance.now();
          const done = await executePlan(plan, hooks);
          prev = done.state;
          // Where the pass went (ms): reading the host's state, planning, and the surfaces' work.
          const ms = (a: number, b: number) => Math.round((b - a) * 10) / 10;
          // The surfaces' part of execute, each (apply_network, apply_watcher, ...).
          const applied = Object.fromEntries(Object.entries(surfaceMs).map(([k, v]) => [`apply_${k}`, ms(0, v)]));
          report('reconciled', plan, prev, {
            observe: ms(t0, t1),
            plan: ms(t1, t2),
            execute: ms(t2, performance.now()),
            ...applied,
          });
          giveBack(plan);
          ctx.metrics?.observe('reconcile', (performance.now() - t0) / 1000);
          // What a reload's caller is told is not in force: the pass as a whole, or each subject denied by it.
          const problems: ReloadProblem[] = plan.ok ? [] : [{ code: plan.code, message: plan.message }];
          for (const f of done.failures) problems.push({ code: f.code, message: f.message, account: f.account });
          return problems;
        },
        onSlow: () => dumpStacks((m) => logger.error({ severity: 'critical' }, m)),
        onError: (e) => critical(`reconcile pass failed: ${(e as Error).message}`, {}),
      });
      triggerReconcile = () => void reconciler.trigger();

      return {
        name: 'agents',
        async reload(next) {
          current = next.loaded;
          const problems = await reconciler.trigger();
          return problems ?? [{ code: 'reconcile_error', message: 'the reconcile pass failed (see the journal)' }];
        },
        async reopenLogs() {
          for (const s of surfaces) await s.reopenLogs?.();
        },
        confined() {
          const out: Record<string, number[]> = {};
          for (const s of surfaces) out[s.surface] = s.status().uids;
          return out;
        },
        async close() {
          dropCollector?.();
          await reconciler.close();
          await closeAll();
        },
      };
    },
  };
}
