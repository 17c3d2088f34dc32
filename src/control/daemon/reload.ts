/**
 * The service's reload (SIGHUP, `systemctl reload`, every policy write): the decision log reopened after a rotation,
 * the config re-read, the host settings and the reconcile brought to it. A bad reload keeps the old policy in
 * force: the new config is applied only once it validated. What could not be put in force is recorded against the
 * SIGHUPs this reload covers (reconcile/generation.ts), for the caller waiting on it.
 */
import { loadConfig, type LoadedConfig } from '../config/load.js';
import type { LeashError } from '../../errors.js';
import type { DecisionLog } from '../../log/decisions.js';
import type { Logger } from '../../log/logger.js';
import type { ReloadProblem, ReloadTracker } from '../reconcile/generation.js';
import type { Reconcile } from '../reconcile/loop.js';
import type { HostSettings } from './host.js';

/** What a reload changes and reports through: the running service's parts. */
export interface Running {
  configPath: string;
  /** The config in force; a reload that validated replaces it. */
  loaded: LoadedConfig;
  tracker: ReloadTracker;
  notify: (state: string) => void;
  logger: Logger;
  host: HostSettings;
  decisions: DecisionLog;
  reconcile: Reconcile | null;
  /** The STATUS line for sd_notify. */
  status(): string;
}

/** UIDs in force by surface (empty with no reconcile), for the status file. */
export function confinedOf(r: Running): Record<string, number[]> {
  return r.reconcile?.confined() ?? {};
}

/**
 * SIGHUP after a rename-style rotation (logrotate's postrotate, `systemctl reload`): this process's descriptor first,
 * then the watcher's (acknowledged), before anything else is decided.
 */
async function reopenLogs(r: Running): Promise<void> {
  try {
    r.decisions.reopen();
  } catch (e) {
    r.logger.error(
      { code: (e as NodeJS.ErrnoException).code },
      `cannot reopen the decision log, still writing to the old file: ${(e as Error).message}`,
    );
    return;
  }
  if (r.reconcile) {
    try {
      await r.reconcile.reopenLogs();
    } catch (e) {
      r.logger.error({ enforcer: r.reconcile.name, err: e }, 'enforcer could not reopen the decision log');
      return;
    }
  }
  r.logger.info({ decisions: r.loaded.config.logging.decisions }, 'decision log reopened');
}

export async function reload(r: Running): Promise<void> {
  const covers = r.tracker.hups;
  const problems: ReloadProblem[] = [];
  await reopenLogs(r);
  let next: LoadedConfig;
  try {
    next = loadConfig(r.configPath);
  } catch (e) {
    r.logger.error({ code: (e as LeashError).code }, `reload refused, old policy kept: ${(e as Error).message}`);
    r.tracker.finished(covers, [{ code: (e as LeashError).code ?? 'config_invalid', message: (e as Error).message }]);
    return;
  }
  r.notify('RELOADING=1');
  try {
    r.host.update(next.config);
  } catch (e) {
    r.logger.error({ code: (e as LeashError).code }, `host setting not changed: ${(e as Error).message}`);
    problems.push({ code: (e as LeashError).code ?? 'host_setting_failed', message: (e as Error).message });
  }
  if (r.reconcile) {
    try {
      problems.push(...(await r.reconcile.reload(next)));
    } catch (e) {
      r.logger.error({ enforcer: r.reconcile.name, err: e }, 'enforcer reload failed; it keeps its previous policy');
      problems.push({ code: 'reconcile_error', message: `${r.reconcile.name}: ${(e as Error).message}` });
    }
  }
  r.loaded = next;
  r.notify(`READY=1\nSTATUS=${r.status()}`);
  r.tracker.finished(covers, problems, confinedOf(r));
  r.logger.info({ generation: covers, problems: problems.length }, 'reloaded');
}

/**
 * The service's SIGHUP, handled from the first moment of a start (Node's default action for it is to exit, and a
 * policy write during a start must neither kill the starting service nor go unconfirmed): each is counted at once;
 * once the service runs (`serve`), each starts a reload.
 */
export function listenForHup(tracker: ReloadTracker): { serve(r: Running): void; off(): void } {
  let running: Running | null = null;
  const onHup = () => {
    tracker.received();
    if (running) void reload(running);
  };
  process.on('SIGHUP', onHup);
  return {
    serve: (r) => (running = r),
    off: () => process.off('SIGHUP', onHup),
  };
}
