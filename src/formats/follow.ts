/**
 * The one follower of a JSON-lines file in Leash (`leash logs -f`, the console's live feed), the way `tail -F`
 * follows one: the descriptor stays open, so a rename-style rotation (the path names another inode) is read to
 * the old file's end before the new file is read from its start; a file shorter than what was read (copytruncate)
 * is read again from 0; a last line without its LF is held until the rest arrives (bytes are split at LF before
 * they are decoded, so a character cut between two writes stays whole); a file that does not exist yet is read
 * from its start once it appears. Also here: tailLines, which reads a file's last lines backwards.
 */
import fs from 'node:fs';
import { LineReader } from './lines.js';

/** Where a follower starts: a byte offset into the file with this inode (another file is read from 0). */
export interface FollowFrom {
  end: number;
  ino: number;
}

/**
 * The last `n` lines of a file (all for n = Infinity), read backwards in blocks and at most `maxBytes` of it (a
 * decision log can be large). A final line without its newline (being written right now) is returned apart, and
 * `end` is where it starts, so a follower started there prints it once, whole.
 */
export function tailLines(
  file: string,
  n: number,
  maxBytes = Infinity,
): { lines: string[]; partial: string; end: number; ino: number } {
  const fd = fs.openSync(file, 'r');
  try {
    const st = fs.fstatSync(fd);
    let pos = st.size;
    const chunks: Buffer[] = [];
    let newlines = 0;
    const block = 64 * 1024;
    // n + 1 newlines guarantee n whole lines (plus a possible partial) are in the chunks read.
    while (pos > 0 && newlines <= n && st.size - pos < maxBytes) {
      const len = Math.min(block, pos, maxBytes - (st.size - pos));
      pos -= len;
      const buf = Buffer.alloc(len);
      fs.readSync(fd, buf, 0, len, pos);
      chunks.unshift(buf);
      for (const b of buf) if (b === 10) newlines++;
    }
    const data = Buffer.concat(chunks);
    const cut = data.lastIndexOf(10) + 1;
    const all = data.toString('utf8', 0, cut).split('\n');
    all.pop();
    // Read from the middle of the file: the first piece is the end of a line that starts before it.
    if (pos > 0) all.shift();
    const partial = data.toString('utf8', cut);
    return { lines: n > 0 ? all.slice(-n) : [], partial, end: st.size - (data.length - cut), ino: st.ino };
  } finally {
    fs.closeSync(fd);
  }
}

export interface FollowLinesOptions {
  path: string;
  /** Each whole non-empty line appended, without its LF. */
  onLine: (line: string) => void;
  /** Where to start in the file there now (default: its start). */
  from?: FollowFrom;
  pollMs?: number;
  /** A line longer than this many bytes is skipped (onOversize), never buffered whole. */
  maxLine?: number;
  onOversize?: () => void;
  /** Wake on inotify changes (default true); the poll timer runs either way. */
  watch?: boolean;
  /** Keep the process alive while following (a CLI); a service's follower must not (default false). */
  keepAlive?: boolean;
}

export interface LineFollower {
  /** Reads what was appended now (tests); the timer does it every pollMs. */
  poll(): void;
  rotations(): number;
  close(): void;
}

export function followLines(o: FollowLinesOptions): LineFollower {
  const maxBytes = o.maxLine ?? 256 * 1024;
  const fresh = () =>
    new LineReader(
      (b) => {
        if (b.length > 0) o.onLine(b.toString('utf8'));
      },
      () => o.onOversize?.(),
      { maxBytes },
    );
  let reader = fresh();
  let fd: number | null = null;
  let ino = -1;
  let pos = 0;
  let from = o.from;
  let rotations = 0;
  let closed = false;
  const buf = Buffer.alloc(1 << 16);
  let watcher: fs.FSWatcher | null = null;
  let woken = false;
  const wake = () => {
    if (woken) return;
    woken = true;
    setImmediate(() => {
      woken = false;
      if (!closed) poll();
    });
  };
  const watch = () => {
    watcher?.close();
    try {
      watcher = fs.watch(o.path, { persistent: false }, wake);
      watcher.on('error', () => {
        watcher?.close();
        watcher = null;
      });
    } catch {
      watcher = null; // the timer still polls
    }
  };
  const open = (): boolean => {
    try {
      fd = fs.openSync(o.path, 'r');
    } catch {
      fd = null;
      return false;
    }
    const st = fs.fstatSync(fd);
    ino = st.ino;
    // The start offset belongs to the file it was measured in: a file rotated in since is read whole.
    pos = from && from.ino === st.ino && from.end <= st.size ? from.end : 0;
    from = undefined;
    reader = fresh();
    if (o.watch !== false) watch();
    return true;
  };
  const drain = () => {
    if (fd === null) return;
    for (;;) {
      const n = fs.readSync(fd, buf, 0, buf.length, pos);
      if (n <= 0) break;
      pos += n;
      reader.push(buf.subarray(0, n));
    }
  };
  const poll = () => {
    if (fd === null) {
      if (open()) drain();
      return;
    }
    drain();
    let st: fs.Stats | null = null;
    try {
      st = fs.statSync(o.path);
    } catch {
      st = null; // renamed away, the new file not there yet: the old one is still read
    }
    if (st && st.ino !== ino) {
      fs.closeSync(fd);
      fd = null;
      rotations++;
      if (open()) drain();
    } else if (st && st.size < pos) {
      pos = 0;
      reader = fresh();
      drain();
    }
  };
  if (open()) drain();
  const timer = setInterval(poll, o.pollMs ?? 100);
  if (!o.keepAlive) timer.unref();
  return {
    poll,
    rotations: () => rotations,
    close() {
      closed = true;
      clearInterval(timer);
      watcher?.close();
      watcher = null;
      if (fd !== null) fs.closeSync(fd);
      fd = null;
    },
  };
}
