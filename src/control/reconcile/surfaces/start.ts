/**
 * The surfaces a service runs, started in this order (filesystem, network, tools), the order execute.ts hands
 * them a subject in; the watcher starts with the first plan's whole map, so no subject runs unjudged on the
 * filesystem while the others start. Which run is the config file's `enforcers` at start.
 */
import type { Config } from '../../config/types.js';
import type { Approvals } from '../../approvals/service.js';
import { hostRunner } from '../../../dataplane/network/nft/run.js';
import type { Logger } from '../../../log/logger.js';
import type { Action } from '../plan.js';
import type { ReconcileOptions, ServiceContext } from '../loop.js';
import type { SurfaceName } from '../../../dataplane/contract.js';
import type { Driven } from '../execute.js';
import { startNetworkSurface } from './network.js';
import { startToolsSurface } from './tools.js';
import { startWatcherSurface } from './watcher.js';

export interface SurfacesStart {
  ctx: ServiceContext;
  /** The config file's, as read at start: which surfaces run and their settings. */
  config: Config;
  /** The first plan's actions (the watcher starts with the whole map). */
  initial: Action[];
  /** How many subjects the first plan holds (the iptables fallback refuses more than one). */
  expectedSubjects: number;
  approvals: Approvals;
  logger: Logger;
  critical: (message: string, detail: Record<string, unknown>) => void;
  opts: ReconcileOptions;
}

/**
 * Starts each surface the config enables and pushes it onto `into` as soon as it runs, so a caller whose start
 * failed half-way closes exactly the ones that started (closeSurfaces).
 */
export async function startSurfaces(into: Driven[], o: SurfacesStart): Promise<void> {
  const { ctx, config: c, approvals, logger, opts } = o;
  // "No policy" entries follow the floor's fail_mode: the one at start here, each pass's after (loop.ts pushes it).
  const failMode = c.fail_mode;
  if (c.enforcers.filesystem)
    into.push(
      await startWatcherSurface({
        config: c,
        initial: o.initial,
        failMode,
        ...(opts.watcherWrap ? { wrap: opts.watcherWrap } : {}),
        ...(opts.watcherArgs ? { args: opts.watcherArgs } : {}),
        ...(opts.watcherSocket ? { adoptSocket: opts.watcherSocket } : {}),
        onFatal: (e) => {
          o.critical(`the watcher died too often: ${e.message}`, { code: e.code });
          opts.onFatal?.(e);
        },
        onRespawn: (i) =>
          logger.warn(
            { pid: i.pid, deaths: i.deaths, takeover: i.takeover },
            i.takeover ? 'watcher died: a standby took over the group' : 'watcher respawned from the current map',
          ),
        onAdopt: (i) => logger.info({ pid: i.pid }, 'watcher adopted: the group held through the service restart'),
        onStandbyUnavailable: (why) => logger.warn({}, `${why}: a watcher death reopens the respawn window`),
        ask: approvals.queue.ask,
      }),
    );
  if (c.enforcers.network)
    into.push(
      await startNetworkSurface({
        config: c,
        runner: opts.runner ?? hostRunner(),
        decisions: ctx.decisions,
        logger,
        expectedSubjects: o.expectedSubjects,
        failMode,
        proxyLogger: ctx.logger.child({ component: 'proxy' }),
        ask: approvals.queue.ask,
        ...(ctx.metrics ? { observe: (stage, s) => ctx.metrics!.observe(stage, s) } : {}),
      }),
    );
  if (c.enforcers.tools)
    into.push(
      await startToolsSurface({
        config: c,
        decisions: ctx.decisions,
        ...(opts.toolsSocket ? { socket: opts.toolsSocket } : {}),
        ask: approvals.queue.ask,
        logger: ctx.logger.child({ component: 'tools' }),
        ...(ctx.metrics ? { onJudge: (s: number) => ctx.metrics!.observe('tools_judge', s) } : {}),
      }),
    );
}

/** Closing releases the chains first: no UID is left redirected to a listener that is gone. */
const CLOSE_ORDER: SurfaceName[] = ['network', 'tools', 'filesystem'];

export async function closeSurfaces(surfaces: readonly Driven[], logger: Logger): Promise<void> {
  for (const { plane: s } of CLOSE_ORDER.flatMap((n) => surfaces.filter((x) => x.plane.surface === n)))
    await s.close().catch((e: unknown) => logger.error({ err: e, surface: s.surface }, 'surface close failed'));
}
