/**
 * What the service serves beside enforcing: the metrics endpoint and the web console (config console.enabled).
 * A failure to serve either is logged, never a reason not to enforce.
 */
import type { Config } from '../config/types.js';
import { launchConsole } from '../console/launch.js';
import type { ConsoleServer } from '../console/server.js';
import type { Logger } from '../../log/logger.js';
import type { Metrics } from '../../metrics/metrics.js';
import { startMetricsServer, type MetricsServer } from '../../metrics/server.js';

export async function startEndpoints(
  config: Config,
  current: () => Config,
  metrics: Metrics,
  logger: Logger,
): Promise<{ close(): Promise<void> }> {
  let metricsServer: MetricsServer | null = null;
  const metricsSocket =
    process.env.LEASH_METRICS_SOCKET !== undefined
      ? process.env.LEASH_METRICS_SOCKET || null
      : config.logging.metrics_socket;
  try {
    if (metricsSocket !== null || config.logging.metrics_listen !== null)
      metricsServer = await startMetricsServer(metrics, {
        socket: metricsSocket,
        listen: config.logging.metrics_listen,
      });
  } catch (e) {
    logger.error({ code: 'metrics_unavailable' }, `metrics endpoint not served: ${(e as Error).message}`);
  }

  let consoleServer: ConsoleServer | null = null;
  if (config.console.enabled) {
    try {
      consoleServer = await launchConsole({
        config: current,
        stateDir: process.env.LEASH_STATE_DIR ?? '/var/lib/leash',
        onError: (e) => logger.error({ code: 'internal' }, `console: ${e.message}`),
      });
      logger.info({ socket: consoleServer.socket, port: consoleServer.port }, 'console serving');
    } catch (e) {
      logger.error({ code: 'console_unavailable' }, `console not served: ${(e as Error).message}`);
    }
  }
  return {
    async close() {
      await consoleServer?.close();
      await metricsServer?.close();
    },
  };
}
