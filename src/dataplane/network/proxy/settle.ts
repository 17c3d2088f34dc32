/**
 * Memory after a load peak. A burst of thousands of connections grows the V8 heap and glibc's arenas; when the
 * connections are gone, V8 keeps the pages it grew until a full collection and glibc keeps its freed pages mapped,
 * so RSS stays near the peak for good. The settler watches the connections and, once a burst or a flood is over,
 * asks for one memory-reducing collection and `malloc_trim`, so RSS follows the load back down. It costs nothing
 * while the load is steady (a few comparisons a tick).
 */
import { loadNative } from '../../../native.js';

export interface SettleOptions {
  /** Open connections now. */
  active: () => number;
  /** Connections opened so far (a counter that only grows). */
  opened: () => number;
  /** What gives memory back (default: releaseMemory). */
  release?: () => void;
  /** Work since the last release worth giving memory back after: this many opened, or a peak this far above now. */
  minWork?: number;
  /** Quiet: fewer than this many opened during the last tick. */
  quiet?: number;
  /** How often the counts are looked at (ms; default 2000). */
  everyMs?: number;
}

let released = 0;
/** How many times this process gave memory back (bench/soak prints it). */
export function releases(): number {
  return released;
}

/**
 * A full, memory-reducing collection (V8's critical memory pressure: the young generation it grew shrinks too,
 * which a plain full collection leaves at its largest) and `malloc_trim`, in the addon (native/common/memory.cc).
 */
export function releaseMemory(): void {
  released++;
  loadNative().releaseMemory();
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
