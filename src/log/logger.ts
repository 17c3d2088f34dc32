import pino, { type Logger, type LevelWithSilent } from 'pino';

export type { Logger };

/**
 * The service's one operational logger (JSON lines on stderr, which systemd sends to the journal).
 * Components take `root.child({ component: 'nft' })`; never bind keys that come from outside.
 * Synchronous on purpose: the service's last words before an exit must not sit in a buffer.
 */
export function createLogger(
  opts: { level?: LevelWithSilent; destination?: pino.DestinationStream | NodeJS.WritableStream } = {},
): Logger {
  return pino(
    { level: opts.level ?? 'info', base: { service: 'leash' }, timestamp: pino.stdTimeFunctions.isoTime },
    opts.destination ?? pino.destination({ fd: 2, sync: true }),
  );
}
