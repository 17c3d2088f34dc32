/**
 * Memory after a load peak. A burst of thousands of connections grows the V8 heap and glibc's arenas; when the
 * connections are gone, V8 keeps the pages it grew until a full collection and glibc keeps its freed pages mapped,
 * so RSS stays near the peak for good. The settler watches the number of open connections and, once it has
 * fallen well below a peak worth the bother, runs one full collection and `malloc_trim`, so RSS follows the load
 * back down. It costs nothing while the load is steady (one comparison a tick).
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { loadNative } from '../../native.js';

export interface SettleOptions {
  /** Open connections now. */
  active: () => number;
  /** Connections opened so far (a counter that only grows). */
  opened: () => number;
  /** What gives memory back (default: a full collection, then malloc_trim). */
  release?: () => void;
  /** Work since the last release worth giving memory back after: this many opened, or a peak this far above now. */
  minWork?: number;
  /** Quiet: fewer than this many opened during the last tick. */
  quiet?: number;
  /** How often the counts are looked at (ms; default 2000). */
  everyMs?: number;
}

let gcFn: (() => void) | null | undefined;
/** A full collection: `--expose-gc`'s gc() if the process has it, else the same function made available now. */
function fullGc(): void {
  if (gcFn === undefined) {
    const g = (globalThis as { gc?: () => void }).gc;
    if (typeof g === 'function') gcFn = g;
    else
      try {
        v8.setFlagsFromString('--expose-gc');
        gcFn = vm.runInNewContext('gc') as () => void;
      } catch {
        gcFn = null;
      }
  }
  gcFn?.();
}

let released = 0;
/** How many times this process gave memory back (bench/soak prints it). */
export function releases(): number {
  return released;
}

export function releaseMemory(): void {
  released++;
  fullGc();
  try {
    loadNative().mallocTrim();
  } catch {
    // An addon without it (an older build): the collection alone still returns V8's pages.
  }
}

/**
 * Starts watching; the returned function stops it. Memory is given back when, since the last release, at least
 * `minWork` connections were opened (or the open count peaked `minWork` above where it is now), the last tick was
 * quiet, and at most a quarter of that peak is still open: after a burst, a flood or a soak, once it is over;
 * never during a steady load.
 */
export function startSettler(opts: SettleOptions): () => void {
  const release = opts.release ?? releaseMemory;
  const minWork = opts.minWork ?? 512;
  const quiet = opts.quiet ?? 32;
  let peak = opts.active();
  let lastOpened = opts.opened();
  let openedAtRelease = lastOpened;
  const timer = setInterval(() => {
    const now = opts.active();
    const opened = opts.opened();
    const recent = opened - lastOpened;
    lastOpened = opened;
    if (now > peak) peak = now;
    const worked = opened - openedAtRelease >= minWork || peak - now >= minWork;
    if (worked && recent < quiet && now <= peak / 4) {
      peak = now;
      openedAtRelease = opened;
      release();
    }
  }, opts.everyMs ?? 2000);
  timer.unref();
  return () => clearInterval(timer);
}
