import fs from 'node:fs';
import path from 'node:path';
import { loadConfig, type LoadedConfig } from '../config/load.js';
import { agentsEnforcer } from '../reconcile/agents.js';
import { LeashError } from '../../errors.js';
import { SURFACES } from '../../engine/types.js';
import { allowLinesOf, createDecisionLog, type DecisionLog } from '../../log/decisions.js';
import { createLogger, type Logger } from '../../log/logger.js';
import {
  createJournal,
  findJournalSocket,
  journalDestination,
  teeDecisionsToJournal,
  type Journal,
} from '../../log/journal.js';
import { loadNative } from '../../native.js';
import {
  countDecisions,
  createMetrics,
  pidNamespaceFamily,
  type Metrics,
  type MetricFamily,
} from '../../metrics/metrics.js';
import { pidNsOf, pidNsWarnings } from '../../dataplane/watcher/pidns.js';
import { startMetricsServer, type MetricsServer } from '../../metrics/server.js';
import { lockService, serviceDirs } from './instance.js';
import { launchConsole } from '../console/launch.js';
import type { ConsoleServer } from '../console/server.js';
import {
  applyHostSettings,
  maxUserNamespacesStatus,
  memfdNoexecStatus,
  type HostPaths,
  type HostSettings,
} from './host.js';
import { holdClosed } from '../../dataplane/network/nft/closed.js';
import { hostRunner } from '../../dataplane/network/nft/run.js';
import { defaultPasswdSource, discoverFrom, readPasswd } from '../subjects/discovery.js';
import { dnsPortFor, PORT_RESERVED } from '../subjects/ports.js';
import {
  createReloadTracker,
  statusFilePath,
  type ReloadProblem,
  type ReloadTracker,
} from '../reconcile/generation.js';

/** What every enforcer is started with. */
export interface ServiceContext {
  loaded: LoadedConfig;
  decisions: DecisionLog;
  logger: Logger;
  /** The service's metrics: enforcers count stages and register collectors here. */
  metrics?: Metrics;
}

/** A running enforcer. `reload` receives a config that already validated; throwing keeps the old one. */
export interface Enforcer {
  name: string;
  reload?(ctx: ServiceContext): Promise<void | ReloadProblem[]>;
  /** Reopens the decision log in any process of its own (the watcher): SIGHUP after a rotation. */
  reopenLogs?(): Promise<void>;
  /** UIDs each surface has in force now, by surface (written to the status file for `leash status`). */
  confined?(): Record<string, number[]>;
  close(): Promise<void>;
}

/**
 * What the service runs, started in the order given and closed in reverse. The service itself runs one:
 * agentsEnforcer (src/control/reconcile/agents.ts), the reconcile loop over the surface adapters in src/control/reconcile/surfaces/.
 */
export interface EnforcerFactory {
  name: string;
  enabled(loaded: LoadedConfig): boolean;
  start(ctx: ServiceContext): Promise<Enforcer>;
}

export interface ServiceOptions {
  configPath: string;
  enforcers: EnforcerFactory[];
  logger?: Logger;
  /** sd_notify; default: the addon when $NOTIFY_SOCKET is set, else nothing. */
  notify?: (state: string) => void;
  /** Where the host settings live (tests); default the real sysctl and /run/leash/host-settings.json. */
  hostPaths?: HostPaths;
  /** The reload status file (src/control/reconcile/generation.ts); null or absent: none is written. */
  statusFile?: string | null;
}

export interface Service {
  /** Resolves when the service has stopped (after a signal or stop()). */
  stopped: Promise<void>;
  stop(): Promise<void>;
  reload(): Promise<void>;
}

function defaultNotify(): (state: string) => void {
  if (!process.env.NOTIFY_SOCKET) return () => {};
  let native;
  try {
    native = loadNative();
  } catch (e) {
    // Under Type=notify systemd waits for READY=1; saying nothing would look like a hang.
    throw new LeashError(
      'native_unavailable',
      `NOTIFY_SOCKET is set but the native addon does not load: ${(e as Error).message.split('\n')[0]}`,
    );
  }
  return (state) => void native.sdNotify(state);
}

function describe(loaded: LoadedConfig, running: string[]): string {
  const c = loaded.config;
  const who = c.user
    ? `leashing ${c.user}${loaded.account ? ` (uid ${loaded.account.uid})` : ''}`
    : 'no configured user (leash-* agent accounts only)';
  const modes = SURFACES.map((s) => `${s} ${c[s].mode}`).join(', ');
  return `${who}: ${modes}; enforcers running: ${running.length ? running.join(', ') : 'none'}`;
}

/** The component a service-side decision comes from, for its journal entry. */
function decisionComponent(rec: { surface: string; subject: unknown }): string {
  if (rec.surface === 'tools') return 'tools';
  const s = rec.subject as { dns?: unknown } | null;
  return s !== null && typeof s === 'object' && 'dns' in s ? 'dns' : 'proxy';
}

/**
 * Starts the service: loads and validates the config with the same loader as `leash validate`
 * (a refused config throws LeashError, exit 2), opens the decision log, starts the enabled
 * enforcers in order, then reports READY=1 with a STATUS line.
 */
export async function startService(opts: ServiceOptions): Promise<Service> {
  // SIGHUP is handled from the first moment: Node's default action for it is to exit, and a policy write during a
  // start must neither kill the starting service nor go unconfirmed.
  const tracker = createReloadTracker(opts.statusFile ?? null);
  let onReady: (() => void) | null = null;
  const onHup = () => {
    tracker.received();
    onReady?.();
  };
  process.on('SIGHUP', onHup);
  try {
    return await startInner(opts, tracker, onHup, (fn) => (onReady = fn));
  } catch (e) {
    process.off('SIGHUP', onHup);
    tracker.remove();
    throw e;
  }
}

async function startInner(
  opts: ServiceOptions,
  tracker: ReloadTracker,
  onHup: () => void,
  setOnHup: (fn: () => void) => void,
): Promise<Service> {
  // Every SIGHUP counted so far is covered by the start: the config and the policy are read after it.
  const coveredAtStart = tracker.hups;
  const loaded = loadConfig(opts.configPath);
  if (loaded.config.user !== null && loaded.account === null) {
    throw new LeashError(
      'user_unknown',
      `account ${loaded.config.user} in ${opts.configPath} does not exist on this host`,
      {
        user: loaded.config.user,
      },
    );
  }
  const notify = opts.notify ?? defaultNotify();
  // The journal, when there is one (config logging.journal): operational lines and decisions go
  // there with fields of their own; otherwise stderr as plain JSON lines, as before.
  const journalSocket = findJournalSocket(loaded.config.logging.journal);
  const journal: Journal | null =
    journalSocket === null
      ? null
      : createJournal({
          socket: journalSocket,
          send: (p, e) => loadNative().journalSend(p, e),
          allowSample: loaded.config.logging.journal_allows,
          identifier: 'leash',
        });
  const root =
    opts.logger ??
    createLogger({
      level: loaded.config.logging.level,
      ...(journal ? { destination: journalDestination(journal, process.stderr) } : {}),
    });
  const logger = root.child({ component: 'service' });
  for (const f of loaded.findings) logger.warn({ code: f.code, path: f.path, severity: f.severity }, f.message);

  const metrics = createMetrics();
  if (journal)
    metrics.collect(() => {
      const st = journal.stats();
      const dropped = Object.values(st.dropped).reduce((a, b) => a + b, 0);
      return [
        {
          name: 'leash_journal_entries',
          help: 'journal entries: sent, dropped (journald refused or did not keep up), allows_skipped (logging.journal_allows)',
          type: 'counter',
          values: [
            { value: st.sent, labels: { outcome: 'sent' } },
            { value: dropped, labels: { outcome: 'dropped' } },
            { value: st.allowsSkipped, labels: { outcome: 'allows_skipped' } },
          ],
        },
      ];
    });
  let decisions: DecisionLog;
  try {
    decisions = createDecisionLog({ sink: loaded.config.logging.decisions, allows: allowLinesOf(loaded.config) });
    if (journal) decisions = teeDecisionsToJournal(decisions, journal, decisionComponent);
    decisions = countDecisions(decisions, metrics);
  } catch (e) {
    throw new LeashError(
      'service_failed',
      `cannot open decision log ${loaded.config.logging.decisions}: ${(e as Error).message}`,
    );
  }
  let ctx: ServiceContext = { loaded, decisions, logger: root, metrics };
  const running: Enforcer[] = [];
  const factories = opts.enforcers;
  // Host settings (config `host`) first: no agent process runs under the policy before they hold.
  let host: HostSettings;
  try {
    host = applyHostSettings(loaded.config, opts.hostPaths);
  } catch (e) {
    await decisions.close();
    throw e;
  }
  if (loaded.config.host.memfd_noexec) logger.info({ setting: 'memfd_noexec', value: 2 }, 'host setting applied');
  if (loaded.config.host.max_user_namespaces)
    logger.info({ setting: 'max_user_namespaces', value: 0 }, 'host setting applied');
  metrics.collect((): MetricFamily[] => [
    {
      name: 'leash_host_setting',
      help: 'host hardening settings (config host): 1 in force now, 0 not',
      type: 'gauge',
      values: [
        {
          value: memfdNoexecStatus(ctx.loaded.config, opts.hostPaths?.memfdNoexec).enforced ? 1 : 0,
          labels: { setting: 'memfd_noexec' },
        },
        {
          value: maxUserNamespacesStatus(ctx.loaded.config, opts.hostPaths?.maxUserNamespaces).enforced ? 1 : 0,
          labels: { setting: 'max_user_namespaces' },
        },
      ],
    },
  ]);
  // A service in a PID namespace of its own (a container) cannot tell the host's processes apart: said at start,
  // and in the metrics leash status reads (docs/filesystem.md, "PID namespaces").
  const pidNs = pidNsOf();
  if (pidNs !== null) {
    for (const w of pidNsWarnings({ service: pidNs }, null)) logger.warn({ code: 'foreign_pid_namespace', pidNs }, w);
    metrics.collect(() => [pidNamespaceFamily('service', pidNs)]);
  }
  const restoreHost = () => {
    for (const p of host.restore()) logger.error({ code: 'host_setting_failed' }, p);
  };
  try {
    for (const f of factories) {
      if (!f.enabled(loaded)) continue;
      running.push(await f.start(ctx));
      logger.info({ enforcer: f.name }, 'enforcer started');
    }
  } catch (e) {
    for (const r of running.reverse()) await r.close().catch(() => {});
    restoreHost();
    await decisions.close();
    throw new LeashError('service_failed', `an enforcer failed to start: ${(e as Error).message}`);
  }

  // The metrics endpoint: a failure to serve it is logged, never a reason not to enforce.
  let metricsServer: MetricsServer | null = null;
  const metricsSocket =
    process.env.LEASH_METRICS_SOCKET !== undefined
      ? process.env.LEASH_METRICS_SOCKET || null
      : loaded.config.logging.metrics_socket;
  try {
    if (metricsSocket !== null || loaded.config.logging.metrics_listen !== null)
      metricsServer = await startMetricsServer(metrics, {
        socket: metricsSocket,
        listen: loaded.config.logging.metrics_listen,
      });
  } catch (e) {
    logger.error({ code: 'metrics_unavailable' }, `metrics endpoint not served: ${(e as Error).message}`);
  }

  // The web console (config console.enabled): like the metrics, a failure to serve it is logged.
  let consoleServer: ConsoleServer | null = null;
  if (loaded.config.console.enabled) {
    try {
      consoleServer = await launchConsole({
        config: () => ctx.loaded.config,
        stateDir: process.env.LEASH_STATE_DIR ?? '/var/lib/leash',
        onError: (e) => logger.error({ code: 'internal' }, `console: ${e.message}`),
      });
      logger.info({ socket: consoleServer.socket, port: consoleServer.port }, 'console serving');
    } catch (e) {
      logger.error({ code: 'console_unavailable' }, `console not served: ${(e as Error).message}`);
    }
  }

  const status = () =>
    describe(
      ctx.loaded,
      running.map((r) => r.name),
    );
  // The loop has nothing else to keep it alive until the enforcers hold handles of their own.
  const keepAlive = setInterval(() => {}, 1 << 30);
  const wdUsec = Number(process.env.WATCHDOG_USEC);
  const watchdog =
    Number.isFinite(wdUsec) && wdUsec > 0 ? setInterval(() => notify('WATCHDOG=1'), Math.max(1, wdUsec / 2000)) : null;

  let resolveStopped!: () => void;
  const stopped = new Promise<void>((r) => (resolveStopped = r));
  let stopping: Promise<void> | null = null;

  const stop = () => {
    stopping ??= (async () => {
      notify('STOPPING=1');
      tracker.phase('stopping');
      logger.info('stopping');
      for (const r of [...running].reverse()) {
        await r.close().catch((e: unknown) => logger.error({ enforcer: r.name, err: e }, 'enforcer close failed'));
      }
      restoreHost();
      await consoleServer?.close();
      await metricsServer?.close();
      await decisions.close();
      clearInterval(keepAlive);
      if (watchdog) clearInterval(watchdog);
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      process.off('SIGHUP', onHup);
      tracker.remove();
      resolveStopped();
    })();
    return stopping;
  };

  // SIGHUP after a rename-style rotation (logrotate's postrotate, `systemctl reload`): this process's
  // descriptor first, then the watcher's (acknowledged), before anything else is decided.
  const reopenLogs = async () => {
    try {
      decisions.reopen();
    } catch (e) {
      logger.error(
        { code: (e as NodeJS.ErrnoException).code },
        `cannot reopen the decision log, still writing to the old file: ${(e as Error).message}`,
      );
      return;
    }
    for (const r of running) {
      try {
        await r.reopenLogs?.();
      } catch (e) {
        logger.error({ enforcer: r.name, err: e }, 'enforcer could not reopen the decision log');
        return;
      }
    }
    logger.info({ decisions: ctx.loaded.config.logging.decisions }, 'decision log reopened');
  };

  const confined = () => Object.assign({}, ...running.map((r) => r.confined?.() ?? {})) as Record<string, number[]>;

  // A bad reload keeps the old policy in force: the new config is applied only once it validated. What could not be
  // put in force is recorded against the SIGHUPs this reload covers (generation.ts), for the caller waiting on it.
  const reload = async () => {
    const covers = tracker.hups;
    const problems: ReloadProblem[] = [];
    await reopenLogs();
    let next: LoadedConfig;
    try {
      next = loadConfig(opts.configPath);
    } catch (e) {
      logger.error({ code: (e as LeashError).code }, `reload refused, old policy kept: ${(e as Error).message}`);
      tracker.finished(covers, [{ code: (e as LeashError).code ?? 'config_invalid', message: (e as Error).message }]);
      return;
    }
    notify('RELOADING=1');
    try {
      host.update(next.config);
    } catch (e) {
      logger.error({ code: (e as LeashError).code }, `host setting not changed: ${(e as Error).message}`);
      problems.push({ code: (e as LeashError).code ?? 'host_setting_failed', message: (e as Error).message });
    }
    const nextCtx = { ...ctx, loaded: next };
    for (const r of running) {
      try {
        const p = await r.reload?.(nextCtx);
        if (Array.isArray(p)) problems.push(...p);
      } catch (e) {
        logger.error({ enforcer: r.name, err: e }, 'enforcer reload failed; it keeps its previous policy');
        problems.push({ code: 'reconcile_error', message: `${r.name}: ${(e as Error).message}` });
      }
    }
    ctx = nextCtx;
    notify(`READY=1\nSTATUS=${status()}`);
    tracker.finished(covers, problems, confined());
    logger.info({ generation: covers, problems: problems.length }, 'reloaded');
  };

  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  setOnHup(() => void reload());
  tracker.finished(coveredAtStart, [], confined());
  tracker.phase('ready');
  notify(`READY=1\nSTATUS=${status()}`);
  logger.info({ status: status() }, 'ready');
  // SIGHUPs that came during the start, after its config was read: one reload covers them all.
  if (tracker.hups > coveredAtStart) void reload();
  return { stopped, stop, reload };
}

/**
 * A start that failed (a bad floor, unreadable state, an enforcer that would not start) leaves no agent open: every
 * leash-* account keeps the chain a crash left (the last good data plane) or gets a closed one (src/dataplane/network/nft/closed.ts).
 * Discovery here needs no floor: the accounts are named by their prefix.
 */
async function closeAfterFailedStart(): Promise<void> {
  const log = createLogger({ level: 'info' }).child({ component: 'service' });
  // Only the host's service holds the host's agents: under systemd (INVOCATION_ID), or started by hand with
  // LEASH_HOLD_CLOSED=1. A start that fails elsewhere (a test's, a `leash -c` tried on a config) changes no rule.
  if (!process.env.INVOCATION_ID && process.env.LEASH_HOLD_CLOSED !== '1') {
    log.error(
      { code: 'service_failed' },
      'start failed: no agent held closed (not under systemd; LEASH_HOLD_CLOSED=1 does it by hand)',
    );
    return;
  }
  try {
    const agents = discoverFrom(readPasswd(defaultPasswdSource()), null).subjects;
    const r = await holdClosed(
      hostRunner(),
      agents.map((a) => ({
        uid: a.uid,
        port: PORT_RESERVED,
        dnsPort: dnsPortFor(PORT_RESERVED),
        udp: 'drop' as const,
      })),
    );
    log.error(
      { code: 'service_failed', kept: r.kept.length, closed: r.closed.length, failed: r.failed },
      `start failed: ${r.kept.length + r.closed.length} agent account(s) held closed on the network (refused) until a start succeeds`,
    );
  } catch (e) {
    log.error(
      { code: 'service_failed', severity: 'critical' },
      `start failed and agents could not be held closed: ${(e as Error).message}`,
    );
  }
}

/** `leash` with no subcommand: run until SIGTERM/SIGINT, then exit 0; exit 1 when the watcher gave up. */
export async function runService(configPath: string): Promise<void> {
  const instance = lockService(serviceDirs(process.env));
  try {
    await serveUntilStopped(configPath);
  } finally {
    instance.release();
  }
}

async function serveUntilStopped(configPath: string): Promise<void> {
  let fatal = false;
  let svc: Service | null = null;
  const wrapS = Number(process.env.LEASH_WATCHER_TIMEOUT_S);
  const factory = agentsEnforcer({
    ...(Number.isFinite(wrapS) && wrapS > 0 ? { watcherWrap: ['timeout', '-s', 'KILL', String(wrapS)] } : {}),
    onFatal: () => {
      // systemd restarts the whole service (Restart=on-failure): exit non-zero after a clean stop.
      fatal = true;
      void svc?.stop();
    },
  });
  // Outside systemd the CLI signals the pid file (see src/cli/policy-common.ts).
  const pidFile = process.env.LEASH_PID_FILE ?? (process.env.NOTIFY_SOCKET ? null : '/run/leash/leash.pid');
  try {
    svc = await startService({ configPath, enforcers: [factory], statusFile: statusFilePath() });
  } catch (e) {
    await closeAfterFailedStart();
    throw e;
  }
  if (pidFile) {
    try {
      fs.mkdirSync(path.dirname(pidFile), { recursive: true, mode: 0o755 });
      fs.writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o644 });
    } catch {
      // Not fatal: the CLI then says how to signal by hand.
    }
  }
  await svc.stopped;
  if (pidFile) fs.rmSync(pidFile, { force: true });
  if (fatal) process.exitCode = 1;
}
