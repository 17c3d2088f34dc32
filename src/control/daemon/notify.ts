/** systemd's side of the service: sd_notify (READY, RELOADING, STOPPING, STATUS) and the watchdog's heartbeat. */
import { LeashError } from '../../errors.js';
import { nativeCommon } from '../../native.js';

/** sd_notify through the addon when $NOTIFY_SOCKET is set, else nothing. */
export function defaultNotify(): (state: string) => void {
  if (!process.env.NOTIFY_SOCKET) return () => {};
  let native;
  try {
    native = nativeCommon();
  } catch (e) {
    // Under Type=notify systemd waits for READY=1; saying nothing would look like a hang.
    throw new LeashError(
      'native_unavailable',
      `NOTIFY_SOCKET is set but the native addon does not load: ${(e as Error).message.split('\n')[0]}`,
    );
  }
  return (state) => void native.sdNotify(state);
}

/**
 * Keeps the loop alive until the enforcers hold handles of their own, and beats the watchdog (WATCHDOG_USEC, at
 * half its period) when systemd asks for one. Returns what stops both.
 */
export function startHeartbeat(notify: (state: string) => void): () => void {
  const keepAlive = setInterval(() => {}, 1 << 30);
  const wdUsec = Number(process.env.WATCHDOG_USEC);
  const watchdog =
    Number.isFinite(wdUsec) && wdUsec > 0 ? setInterval(() => notify('WATCHDOG=1'), Math.max(1, wdUsec / 2000)) : null;
  return () => {
    clearInterval(keepAlive);
    if (watchdog) clearInterval(watchdog);
  };
}
