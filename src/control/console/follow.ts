/**
 * The console's source of decisions: the decision log file (logging.decisions), followed by the one
 * follower (src/formats/follow.ts: rotation, truncation, a partial last line) on each inotify change
 * and every `pollMs`. Kept: the last `ringSize` lines (the page's first screen and the ref details), and
 * counts per surface and action in `bucketMs` buckets over the last `buckets` (the charts). All
 * bounded; a line over `maxLine` bytes is skipped and counted.
 */
import fs from 'node:fs';
import readline from 'node:readline';
import { followLines, tailLines, type FollowFrom } from '../../formats/follow.js';

export interface FollowedLine {
  text: string;
  ts: string;
  ref: string;
  uid: number;
  surface: string;
  action: string;
  reason: string;
  /** An allow_summary line: the allows it counts that were not written whole (logging.allows). */
  counted?: number;
}

export interface Bucket {
  start: number;
  counts: Record<string, number>;
}

export interface Follower {
  recent(n: number, pred?: (l: FollowedLine) => boolean): FollowedLine[];
  /** The line of a ref: the ring first, then the file itself (older lines). */
  byRef(ref: string): Promise<FollowedLine | null>;
  buckets(): Bucket[];
  stats(): { lines: number; skipped: number; ring: number; rotations: number };
  /** Reads what was appended now (tests, the benchmark); the timer does it every pollMs. */
  poll(): void;
  close(): void;
}

export interface FollowOptions {
  path: string;
  onLine: (l: FollowedLine) => void;
  pollMs?: number;
  ringSize?: number;
  bucketMs?: number;
  buckets?: number;
  maxLine?: number;
  /** Wake on inotify changes (default true); the poll timer runs either way. */
  watch?: boolean;
  /** Read the last `preload` bytes of the file at start into the ring (not to onLine). */
  preload?: number;
}

export const REF = /^[a-z2-7]{8}$/;

export function parseLine(text: string): FollowedLine | null {
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null || typeof v.ref !== 'string') return null;
  const sub = v.subject as { allowed?: unknown; written?: unknown } | null;
  const counted =
    v.reason === 'allow_summary' && typeof sub?.allowed === 'number'
      ? sub.allowed - (typeof sub.written === 'number' ? sub.written : 0)
      : undefined;
  return {
    ...(counted !== undefined ? { counted } : {}),
    text,
    ts: typeof v.ts === 'string' ? v.ts : '',
    ref: v.ref,
    uid: typeof v.uid === 'number' ? v.uid : -1,
    surface: String(v.surface ?? ''),
    action: String(v.action ?? ''),
    reason: String(v.reason ?? ''),
  };
}

export function followDecisions(o: FollowOptions): Follower {
  const ringSize = o.ringSize ?? 5000;
  const bucketMs = o.bucketMs ?? 10_000;
  const nBuckets = o.buckets ?? 180;
  const maxLine = o.maxLine ?? 256 * 1024;
  const ring: FollowedLine[] = [];
  let ringStart = 0;
  const buckets: Bucket[] = [];
  let lines = 0;
  let skipped = 0;

  const keep = (l: FollowedLine) => {
    if (ring.length < ringSize) ring.push(l);
    else {
      ring[ringStart] = l;
      ringStart = (ringStart + 1) % ringSize;
    }
    const t = Date.parse(l.ts);
    const start = Math.floor((Number.isFinite(t) ? t : Date.now()) / bucketMs) * bucketMs;
    let b = buckets.at(-1);
    if (!b || b.start < start) {
      b = { start, counts: {} };
      buckets.push(b);
      while (buckets.length > nBuckets) buckets.shift();
    } else if (b.start > start) b = buckets.find((x) => x.start === start) ?? b;
    const k = `${l.surface}/${l.action}`;
    // A summary line stands for the allows of its period that have no line of their own.
    b.counts[k] = (b.counts[k] ?? 0) + (l.counted ?? 1);
  };
  const take = (text: string, live: boolean) => {
    if (text.length === 0) return;
    if (text.length > maxLine) return void skipped++;
    const l = parseLine(text);
    if (!l) return void skipped++;
    lines++;
    keep(l);
    if (live) o.onLine(l);
  };
  let from: FollowFrom | undefined;
  try {
    const t = tailLines(o.path, Infinity, o.preload ?? 2 * 1024 * 1024);
    for (const text of t.lines) take(text, false);
    from = t;
  } catch {
    from = undefined; // not there yet: read from its start once it appears
  }
  const lf = followLines({
    path: o.path,
    from,
    onLine: (text) => take(text, true),
    onOversize: () => skipped++,
    maxLine,
    pollMs: o.pollMs,
    watch: o.watch,
  });

  const ordered = () => [...ring.slice(ringStart), ...ring.slice(0, ringStart)];
  return {
    recent(n, pred) {
      const all = ordered();
      const out: FollowedLine[] = [];
      for (let i = all.length - 1; i >= 0 && out.length < n; i--) if (!pred || pred(all[i]!)) out.push(all[i]!);
      return out.reverse();
    },
    async byRef(ref) {
      if (!REF.test(ref)) return null;
      const hit = ring.find((l) => l.ref === ref);
      if (hit) return hit;
      if (!fs.existsSync(o.path)) return null;
      const needle = `"ref":"${ref}"`;
      const rl = readline.createInterface({ input: fs.createReadStream(o.path, { encoding: 'utf8' }) });
      for await (const text of rl) {
        if (text.includes(needle)) {
          const l = parseLine(text);
          if (l && l.ref === ref) {
            rl.close();
            return l;
          }
        }
      }
      return null;
    },
    buckets: () => buckets.map((b) => ({ start: b.start, counts: { ...b.counts } })),
    stats: () => ({ lines, skipped, ring: ring.length, rotations: lf.rotations() }),
    poll: () => lf.poll(),
    close: () => lf.close(),
  };
}
