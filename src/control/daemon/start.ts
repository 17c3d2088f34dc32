/**
 * The service: the config read and validated with the same loader as `leash validate`, the logs opened, the host
 * settings applied, the reconcile started (src/control/reconcile/loop.ts), then READY=1. Signals: SIGHUP reloads
 * (reload.ts), SIGTERM and SIGINT stop; a stop closes in the reverse order.
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig, type LoadedConfig } from '../config/load.js';
import { LeashError } from '../../errors.js';
import { SURFACES } from '../../engine/types.js';
import type { Logger } from '../../log/logger.js';
import { createMetrics, pidNamespaceFamily } from '../../metrics/metrics.js';
import { pidNsOf, pidNsWarnings } from '../../dataplane/watcher/pidns.js';
import { createReloadTracker, statusFilePath, type ReloadTracker } from '../reconcile/generation.js';
import {
  reconcileEnabled,
  startReconcile,
  type Reconcile,
  type ReconcileOptions,
  type ServiceContext,
} from '../reconcile/loop.js';
import { closeAfterFailedStart } from './failed-start.js';
import { startEndpoints } from './endpoints.js';
import { applyHostSettings, hostSettingFamilies, type HostPaths, type HostSettings } from './host.js';
import { lockService, serviceDirs } from './instance.js';
import { collectJournal, openDecisions, openJournal } from './logging.js';
import { defaultNotify, startHeartbeat } from './notify.js';
import { confinedOf, listenForHup, reload, type Running } from './reload.js';

export interface ServiceOptions {
  configPath: string;
  /** How the reconcile runs (the watcher's wrap, sockets, state directory, what a fatal watcher does). */
  reconcile?: ReconcileOptions;
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

function describe(loaded: LoadedConfig, running: string[]): string {
  const c = loaded.config;
  const who = c.user
    ? `leashing ${c.user}${loaded.account ? ` (uid ${loaded.account.uid})` : ''}`
    : 'no configured user (leash-* agent accounts only)';
  const modes = SURFACES.map((s) => `${s} ${c[s].mode}`).join(', ');
  return `${who}: ${modes}; enforcers running: ${running.length ? running.join(', ') : 'none'}`;
}

/**
 * Starts the service: loads and validates the config with the same loader as `leash validate`
 * (a refused config throws LeashError, exit 2), opens the decision log, starts the reconcile when
 * any enforcer is on, then reports READY=1 with a STATUS line.
 */
export async function startService(opts: ServiceOptions): Promise<Service> {
  const tracker = createReloadTracker(opts.statusFile ?? null);
  const hup = listenForHup(tracker);
  try {
    return await startInner(opts, tracker, hup);
  } catch (e) {
    hup.off();
    tracker.remove();
    throw e;
  }
}

/** Reads the config; one whose user does not exist is refused (user_unknown). */
function loadServiceConfig(configPath: string): LoadedConfig {
  const loaded = loadConfig(configPath);
  if (loaded.config.user !== null && loaded.account === null) {
    throw new LeashError('user_unknown', `account ${loaded.config.user} in ${configPath} does not exist on this host`, {
      user: loaded.config.user,
    });
  }
  return loaded;
}

async function startInner(
  opts: ServiceOptions,
  tracker: ReloadTracker,
  hup: ReturnType<typeof listenForHup>,
): Promise<Service> {
  // Every SIGHUP counted so far is covered by the start: the config and the policy are read after it.
  const coveredAtStart = tracker.hups;
  const loaded = loadServiceConfig(opts.configPath);
  const notify = opts.notify ?? defaultNotify();
  const { journal, root } = openJournal(loaded, opts.logger);
  const logger = root.child({ component: 'service' });
  for (const f of loaded.findings) logger.warn({ code: f.code, path: f.path, severity: f.severity }, f.message);

  const metrics = createMetrics();
  if (journal) collectJournal(metrics, journal);
  const decisions = openDecisions(loaded, journal, metrics);
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
  const r: Running = {
    configPath: opts.configPath,
    loaded,
    tracker,
    notify,
    logger,
    host,
    decisions,
    reconcile: null,
    status: () => describe(r.loaded, r.reconcile ? [r.reconcile.name] : []),
  };
  metrics.collect(() => hostSettingFamilies(r.loaded.config, opts.hostPaths));
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
    r.reconcile = await startReconcileIfEnabled({ loaded, decisions, logger: root, metrics }, opts.reconcile);
    if (r.reconcile) logger.info({ enforcer: r.reconcile.name }, 'enforcer started');
  } catch (e) {
    restoreHost();
    await decisions.close();
    throw new LeashError('service_failed', `an enforcer failed to start: ${(e as Error).message}`);
  }
  const endpoints = await startEndpoints(loaded.config, () => r.loaded.config, metrics, logger);
  const stopHeartbeat = startHeartbeat(notify);

  let resolveStopped!: () => void;
  const stopped = new Promise<void>((res) => (resolveStopped = res));
  let stopping: Promise<void> | null = null;
  const stop = () => {
    stopping ??= (async () => {
      notify('STOPPING=1');
      tracker.phase('stopping');
      logger.info('stopping');
      await r.reconcile
        ?.close()
        .catch((e: unknown) => logger.error({ enforcer: r.reconcile!.name, err: e }, 'enforcer close failed'));
      restoreHost();
      await endpoints.close();
      await decisions.close();
      stopHeartbeat();
      process.off('SIGTERM', stop);
      process.off('SIGINT', stop);
      hup.off();
      tracker.remove();
      resolveStopped();
    })();
    return stopping;
  };

  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  hup.serve(r);
  tracker.finished(coveredAtStart, [], confinedOf(r));
  tracker.phase('ready');
  notify(`READY=1\nSTATUS=${r.status()}`);
  logger.info({ status: r.status() }, 'ready');
  // SIGHUPs that came during the start, after its config was read: one reload covers them all.
  if (tracker.hups > coveredAtStart) void reload(r);
  return { stopped, stop, reload: () => reload(r) };
}

/** The reconcile, when the config runs any enforcer at all. */
async function startReconcileIfEnabled(ctx: ServiceContext, opts?: ReconcileOptions): Promise<Reconcile | null> {
  return reconcileEnabled(ctx.loaded) ? startReconcile(ctx, opts) : null;
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
  const reconcile: ReconcileOptions = {
    ...(Number.isFinite(wrapS) && wrapS > 0 ? { watcherWrap: ['timeout', '-s', 'KILL', String(wrapS)] } : {}),
    onFatal: () => {
      // systemd restarts the whole service (Restart=on-failure): exit non-zero after a clean stop.
      fatal = true;
      void svc?.stop();
    },
  };
  // Outside systemd the CLI signals the pid file (see src/cli/reload.ts).
  const pidFile = process.env.LEASH_PID_FILE ?? (process.env.NOTIFY_SOCKET ? null : '/run/leash/leash.pid');
  try {
    svc = await startService({ configPath, reconcile, statusFile: statusFilePath() });
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
