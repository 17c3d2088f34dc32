/**
 * What `leash validate` says about `logging.decisions` beyond its syntax (the schema refuses `/`,
 * relative paths, control characters, `.`/`..` segments and /proc, /sys): whether the service
 * could really append decision lines there (docs/config.md "The decision sink"). The service runs
 * as root and creates missing directories, so the danger is a sink it can open all too well:
 * /etc/passwd, a device, a symlink to somewhere else.
 */
import fs from 'node:fs';
import path from 'node:path';

/** Why the service cannot (or must not) append decision lines to `sink`, or null. */
export function sinkProblem(sink: string): string | null {
  if (sink === 'stdout') return null;
  let st: fs.Stats;
  try {
    st = fs.lstatSync(sink);
  } catch (e) {
    const c = (e as NodeJS.ErrnoException).code;
    if (c !== 'ENOENT' && c !== 'ENOTDIR') return `cannot inspect ${sink}: ${(e as NodeJS.ErrnoException).code}`;
    // A new file: the nearest existing ancestor must be a directory (the service creates the rest).
    for (let dir = path.dirname(sink); ; dir = path.dirname(dir)) {
      try {
        const d = fs.statSync(dir);
        return d.isDirectory() ? null : `${dir} is not a directory, so ${sink} cannot be created`;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT')
          return `cannot inspect ${dir}: ${(e as NodeJS.ErrnoException).code}`;
        if (dir === '/') return null;
      }
    }
  }
  if (st.isSymbolicLink())
    return `${sink} is a symbolic link: the service would write wherever it points; name the file itself`;
  if (st.isDirectory()) return `${sink} is a directory; name a file in it`;
  if (st.isFIFO()) return null; // a collector reading a pipe is the operator's choice
  if (st.isCharacterDevice())
    return sink === '/dev/null' ? null : `${sink} is a device; only /dev/null (discard) is accepted`;
  if (!st.isFile()) return `${sink} is not a regular file (a socket or block device)`;
  if (st.size === 0) return null;
  // An existing file must already be a decision log: its first line is a JSON object.
  let head: string;
  try {
    const fd = fs.openSync(sink, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    try {
      const buf = Buffer.alloc(65536);
      head = buf.subarray(0, fs.readSync(fd, buf, 0, buf.length, 0)).toString('utf8');
    } finally {
      fs.closeSync(fd);
    }
  } catch (e) {
    return `cannot read ${sink}: ${(e as NodeJS.ErrnoException).code}`;
  }
  const nl = head.indexOf('\n');
  const first = nl >= 0 ? head.slice(0, nl) : head;
  try {
    const v: unknown = JSON.parse(first);
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) return null;
  } catch {
    // fall through
  }
  return `${sink} exists and is not a decision log (its first line is not a JSON object); the service would append decision lines to it`;
}
