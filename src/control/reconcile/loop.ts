/**
 * The service's enforcement of every subject at once: observe (discovery -> resolution) -> plan -> execute over the
 * surfaces (the watcher map, the nft chains and proxy listeners, the tools gate's per-UID policies). A reload (the
 * service's SIGHUP) runs one coalesced pass that changes only what differs.
 *
 * The surfaces apply a pass's subjects side by side (execute.ts); each watcher map entry is acknowledged before
 * apply returns, and within the network surface a subject's listener is open before its redirect goes in.
 */
import type { Config } from '../config/types.js';
import type { LoadedConfig } from '../config/load.js';
import type { Runner } from '../../dataplane/network/nft/run.js';
import { isLeashError, LeashError } from '../../errors.js';
import { createResolver, resolveSubject } from '../policy/resolve.js';
import { loadPolicyState, stateCache, type StateCache } from '../policy/state.js';
import { warmBindings } from '../policy/bindings.js';
import { discoverAsync, type PasswdSource } from '../subjects/discovery.js';
import { assignPorts, PORT_RESERVED } from '../subjects/ports.js';
import type { DecisionLog } from '../../log/decisions.js';
import type { Logger } from '../../log/logger.js';
import type { Metrics } from '../../metrics/metrics.js';
import { startApprovals, type Approvals } from '../approvals/service.js';
import { enforcerMismatches } from './enforcers.js';
import { executePlan, type Driven, type ExecuteEvents } from './execute.js';
import type { ReloadProblem } from './generation.js';
import { releaseAfter } from './memory.js';
import { collectSubjects } from './metrics.js';
import {
  emptyApplied,
  planReconcile,
  type AppliedState,
  type ApplyAction,
  type Observation,
  type Plan,
} from './plan.js';
import { dumpStacks } from './stacks.js';
import { closeSurfaces, startSurfaces } from './surfaces/start.js';

/** What the reconcile is started with: the config as loaded, the decision log, the logger and the metrics. */
export interface ServiceContext {
  loaded: LoadedConfig;
  decisions: DecisionLog;
  logger: Logger;
  /** The service's metrics: stages are counted and collectors registered here. */
  metrics?: Metrics;
}

export interface ReconcileOptions {
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

/** The name the service gives the reconcile in its STATUS line and journal ("enforcers running: agents"). */
export const RECONCILE_NAME = 'agents';

/** Whether the config runs any enforcer at all: with none, the service runs no reconcile. */
export function reconcileEnabled(l: LoadedConfig): boolean {
  return l.config.enforcers.network || l.config.enforcers.filesystem || l.config.enforcers.tools;
}

/** The running reconcile, as the daemon holds it. */
export type Reconcile = Awaited<ReturnType<typeof startReconcile>>;

type EnforcerSwitches = Config['enforcers'];

/**
 * Observes the host, starts the approvals queue and the surfaces with the first plan, carries it out, and returns
 * the handle the daemon reloads and closes.
 */
export async function startReconcile(ctx: ServiceContext, opts: ReconcileOptions = {}) {
  const logger = ctx.logger.child({ component: 'reconcile' });
  const stateDir = opts.stateDir ?? process.env.LEASH_STATE_DIR ?? '/var/lib/leash';
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

  // A persisted approval changed a profile: the queue's own event, answered with a pass.
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

  const surfaces: Driven[] = [];
  const closeAll = async () => {
    // Pending requests first: each held action is answered with a block (approval_cancelled), never an allow.
    await approvals.close().catch((e: unknown) => logger.error({ err: e }, 'approvals close failed'));
    await closeSurfaces(surfaces, logger);
  };
  try {
    await startSurfaces(surfaces, {
      ctx,
      config: c,
      initial: initialPlan.actions,
      expectedSubjects: Math.max(1, first.subjects.length),
      approvals,
      logger,
      critical,
      opts,
    });
  } catch (e) {
    await closeAll();
    throw e;
  }

  // Said whenever a subject is (re)applied, so a profile change that introduces one is heard.
  const noteEnforcers = (a: { account: string; uid: number; policy: { enforcers: EnforcerSwitches } }) => {
    for (const m of enforcerMismatches(a.account, a.policy.enforcers, c.enforcers)) {
      if (m.critical) critical(m.message, { uid: a.uid, surface: m.surface });
      else logger.warn({ uid: a.uid, surface: m.surface }, m.message);
    }
  };
  /** Time each surface spent applying in the current pass (ms), for the reconciled line. */
  let surfaceMs: Record<string, number> = {};
  const execute = (plan: Plan) => {
    const ev: ExecuteEvents = {
      critical,
      applying: noteEnforcers,
      // A subject's policy changed: its session approvals end (docs/approvals.md).
      applied: (actions: ApplyAction[]) => {
        for (const a of actions) approvals.queue.endSessions(a.uid);
      },
      withdrawing: (uid) => approvals.forget(uid),
      ms: surfaceMs,
    };
    return executePlan(plan, surfaces, ev);
  };

  const report = (what: string, plan: Plan, applied: AppliedState, ms?: Record<string, number>) => {
    const counts: Record<string, number> = {};
    for (const a of plan.actions) counts[a.kind] = (counts[a.kind] ?? 0) + 1;
    logger.info({ mode: applied.mode, subjects: applied.subjects.size, ...counts, ...(ms ? { ms } : {}) }, what);
  };

  let prev: AppliedState;
  try {
    const done = await execute(initialPlan);
    prev = done.state;
    report('subjects applied', initialPlan, prev);
    releaseAfter(initialPlan);
    // Once the start is in force, off its path: what the next pass would otherwise make first.
    setTimeout(() => warmObserveCache(cache), 1000).unref();
  } catch (e) {
    await closeAll();
    throw e;
  }

  const dropCollector = ctx.metrics?.collect(() => collectSubjects(prev, approvals, surfaces));

  const reconciler = createReconciler<ReloadProblem[]>({
    pass: async () => {
      const t0 = performance.now();
      surfaceMs = {};
      // Pushed down before the pass: what a subject without a policy is answered under from now on (a reload's floor).
      for (const s of surfaces) s.plane.setFailMode?.(current.config.fail_mode);
      const obs = await observe({ config: () => current.config, stateDir, cache });
      const t1 = performance.now();
      if (obs.ok) for (const w of obs.warnings) logger.warn(w);
      if (obs.ok) approvals.setSubjects(obs.subjects.map((s) => s.subject));
      const plan = planReconcile(prev, obs);
      const t2 = performance.now();
      const done = await execute(plan);
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
      releaseAfter(plan);
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
    name: RECONCILE_NAME,
    /** A config that already validated: one coalesced pass; what it could not put in force. */
    async reload(next: LoadedConfig): Promise<ReloadProblem[]> {
      current = next;
      const problems = await reconciler.trigger();
      return problems ?? [{ code: 'reconcile_error', message: 'the reconcile pass failed (see the journal)' }];
    },
    /** Reopens the decision log in any process of a surface's own (the watcher): SIGHUP after a rotation. */
    async reopenLogs(): Promise<void> {
      for (const s of surfaces) await s.plane.reopenLog?.();
    },
    /** UIDs each surface has in force now, by surface (written to the status file for `leash status`). */
    confined(): Record<string, number[]> {
      const out: Record<string, number[]> = {};
      for (const s of surfaces) out[s.plane.surface] = s.plane.enforcing().uids;
      return out;
    },
    async close(): Promise<void> {
      dropCollector?.();
      await reconciler.close();
      await closeAll();
    },
  };
}

/**
 * SIGHUP coalescing for the reconcile: a signal that arrives during a pass never re-enters the
 * half-applied one; any number of them become exactly one further pass afterwards. Each pass is
 * armed with a watchdog: past `slowMs` (30 s) `onSlow` runs once (the service dumps every stack to
 * the journal), and the pass is left to finish.
 */
export interface ReconcilerOptions<T = void> {
  /** One pass; what it returns is what the triggers it covers resolve with (a pass that threw: undefined). */
  pass: () => Promise<T>;
  slowMs?: number;
  onSlow?: () => void;
  onError?: (e: unknown) => void;
}

export function createReconciler<T = void>(opts: ReconcilerOptions<T>) {
  const slowMs = opts.slowMs ?? 30_000;
  let running: Promise<void> | null = null;
  let pending: { promise: Promise<T | undefined>; resolve: (v: T | undefined) => void } | null = null;
  let closed = false;
  let passes = 0;

  const runPass = async (): Promise<T | undefined> => {
    passes++;
    const timer = setTimeout(() => opts.onSlow?.(), slowMs);
    try {
      return await opts.pass();
    } catch (e) {
      opts.onError?.(e);
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  };

  const loop = async (firstDone: (v: T | undefined) => void): Promise<void> => {
    firstDone(await runPass());
    while (pending) {
      const p = pending;
      pending = null;
      p.resolve(await runPass());
    }
    running = null;
  };

  return {
    get passes() {
      return passes;
    },
    /** Requests a pass; resolves when a pass that started after this request has finished, with what it returned. */
    trigger(): Promise<T | undefined> {
      if (closed) return Promise.resolve(undefined);
      if (!running) {
        let done!: (v: T | undefined) => void;
        const first = new Promise<T | undefined>((r) => (done = r));
        running = loop(done);
        return first;
      }
      if (!pending) {
        let resolve!: (v: T | undefined) => void;
        const promise = new Promise<T | undefined>((r) => (resolve = r));
        pending = { promise, resolve };
      }
      return pending.promise;
    },
    /** Waits for the running pass (and a pending one) to finish; later triggers are ignored. */
    async close(): Promise<void> {
      closed = true;
      while (running) await running;
    },
  };
}

/* The observe step: what a pass reads of the host. */

export interface ObserveOptions {
  /** The floor, or how to re-read it (a SIGHUP re-reads leash.yaml too; a failed read changes nothing). */
  config: Config | (() => Config);
  stateDir: string;
  passwd?: PasswdSource;
  /** Kept by a caller that observes again and again (the service): see observeCache. */
  cache?: ObserveCache;
}

/**
 * What the service keeps from one pass to the next: the parsed profiles and bindings (by text) and each subject's
 * resolution (by its inputs). A pass then re-reads every file but parses and resolves only what changed.
 */
export interface ObserveCache {
  state: StateCache;
  resolver: ReturnType<typeof createResolver>;
}

export function observeCache(): ObserveCache {
  return { state: stateCache(), resolver: createResolver() };
}

/** What the next pass would otherwise make (the bindings' entries: warmBindings), for a caller with time to spare. */
export function warmObserveCache(cache: ObserveCache): void {
  warmBindings(cache.state.bindings);
}

/**
 * The I/O half of a reconcile pass: passwd, ports, bindings, profiles -> an Observation for
 * planReconcile. Wholesale failures (passwd, port map, bindings file) become `ok: false`. With no
 * agent accounts nothing under the state directory is created.
 */
export async function observe(opts: ObserveOptions): Promise<Observation> {
  try {
    const config = typeof opts.config === 'function' ? opts.config() : opts.config;
    const d = await discoverAsync(config.user, opts.passwd);
    let ports: Record<string, { port: number }> = {};
    if (d.mode === 'multi') {
      const a = await assignPorts(opts.stateDir, d.subjects);
      ports = a.ports;
    }
    const state = loadPolicyState(config, opts.stateDir, opts.cache?.state);
    const resolve = opts.cache
      ? (s: (typeof d.subjects)[number]) => opts.cache!.resolver.resolve(s, state)
      : (s: (typeof d.subjects)[number]) => resolveSubject(s, state);
    const observation: Observation = {
      ok: true,
      mode: d.mode,
      warnings: d.warnings,
      subjects: d.subjects.map((subject) => ({
        subject,
        // Single-subject: the one listener on the reserved port. Multi: the account's port for life, or
        // none (the pool is exhausted) and that subject fails alone.
        port: d.mode === 'single' ? PORT_RESERVED : (ports[subject.account]?.port ?? null),
        resolution: resolve(subject),
      })),
    };
    opts.cache?.resolver.endPass();
    return observation;
  } catch (e) {
    if (isLeashError(e)) return { ok: false, code: e.code, message: e.message };
    return { ok: false, code: 'reconcile_error', message: (e as Error).message };
  }
}
