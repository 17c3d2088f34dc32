import fs from 'node:fs';
import type { Command } from 'commander';
import { loadConfig } from '../control/config/load.js';
import { LeashError } from '../errors.js';
import { escapeForTerminal } from '../log/escape.js';
import { formatLogLine, isFiltering, matchLine, parseLogFilter, type LogFilter } from '../log/filter.js';
import { defaultPasswdSource, readPasswd } from '../control/subjects/discovery.js';
import { configPath } from './context.js';
import { followLines, tailLines, type FollowFrom } from '../formats/follow.js';

// Writers batch (the watcher drains every 100 ms), so a log is in time order only to within this:
// a backwards scan for --since stops this far past the cut-off.
const SINCE_SLACK_MS = 60_000;

/**
 * The last `n` lines that pass `f` (all of them for n = Infinity), read backwards in blocks: a
 * block filter over a large log of allows reads until it has n blocks or passes --since, not the
 * whole file. The partial last line is left to a follower, as with tailLines (src/formats/follow.ts).
 */
export function tailMatching(file: string, n: number, f: LogFilter): { lines: string[]; end: number; ino: number } {
  const { end, ino } = tailLines(file, 0);
  const fd = fs.openSync(file, 'r');
  try {
    const block = 256 * 1024;
    const found: string[] = [];
    let pos = end;
    // The bytes from pos to the earliest line already judged: the end of a line that starts before pos.
    let carry = Buffer.alloc(0);
    let stop = false;
    while (pos > 0 && !stop && found.length < n) {
      const len = Math.min(block, pos);
      pos -= len;
      const buf = Buffer.alloc(len);
      fs.readSync(fd, buf, 0, len, pos);
      const all = carry.length > 0 ? Buffer.concat([buf, carry]) : buf;
      // Every line of `all` but the first is whole (all ends at a newline); the first is whole at the file's start.
      const first = all.indexOf(10);
      if (first < 0 && pos > 0) {
        carry = all;
        continue;
      }
      let stopAt = all.length;
      const lowest = pos > 0 ? first + 1 : 0;
      while (stopAt > lowest && found.length < n && !stop) {
        const nl = stopAt >= 2 ? all.lastIndexOf(10, stopAt - 2) : -1;
        const from = nl < lowest - 1 ? lowest : nl + 1;
        const text = all.subarray(from, all[stopAt - 1] === 10 ? stopAt - 1 : stopAt).toString('utf8');
        stopAt = from;
        if (text.length === 0) continue;
        const m = matchLine(f, text);
        if (m.ok) found.push(text);
        else if (f.since !== null && m.line && Date.parse(String(m.line.ts)) < f.since - SINCE_SLACK_MS) stop = true;
      }
      carry = all.subarray(0, lowest);
    }
    return { lines: found.reverse(), end, ino };
  } finally {
    fs.closeSync(fd);
  }
}

interface Printer {
  filter: LogFilter;
  json: boolean;
  accountOf: (uid: number) => string | null;
}

function emit(line: string, p?: Printer): void {
  if (p && !p.json) {
    const m = matchLine(p.filter, line);
    if (!m.ok) return;
    if (m.line) line = formatLogLine(m.line, p.accountOf);
  } else if (p && isFiltering(p.filter) && !matchLine(p.filter, line).ok) return;
  process.stdout.write(`${escapeForTerminal(line)}\n`);
}

function accountsOnce(): (uid: number) => string | null {
  let names: Map<number, string> | null = null;
  return (uid) => {
    if (names === null) {
      names = new Map();
      try {
        for (const e of readPasswd(defaultPasswdSource())) names.set(e.uid, e.name);
      } catch {
        /* names are a nicety: the UID is printed anyway */
      }
    }
    return names.get(uid) ?? null;
  };
}

/** Prints the lines appended from `from` on (rotation, truncation, a file not there yet: see followLines) until a signal. */
async function follow(file: string, from: FollowFrom | undefined, p: Printer): Promise<void> {
  const f = followLines({ path: file, from, onLine: (l) => emit(l, p), pollMs: 200, keepAlive: true });
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  f.close();
}

export function register(program: Command): void {
  program
    .command('logs')
    .description('print the decision log, one line per decision (control characters and bidi overrides escaped)')
    .option('-f, --follow', 'keep printing lines as they are appended')
    .option('-n, --tail <n>', 'print the last N matching lines first (default 10; with --since, all since then)')
    .option('--action <list>', 'only these actions: allow, block, ask, would_block (comma-separated)')
    .option('--subject <who>', 'only this subject: a UID or an account name')
    .option('--surface <list>', 'only these surfaces: network, filesystem, commands, tools (comma-separated)')
    .option('--since <when>', 'only lines from this long ago (30s, 10m, 2h, 1d) or since a timestamp')
    .option('--json', "print the log's JSON lines as they are instead of text")
    .option('--file <path>', 'read this file instead of the configured logging.decisions')
    .action(async (opts: LogsOptions, cmd: Command) => {
      if (opts.tail !== undefined && !/^\d+$/.test(opts.tail)) {
        throw new LeashError('usage', `--tail must be a non-negative number, not "${opts.tail}"`, { tail: opts.tail });
      }
      const accountOf = accountsOnce();
      const filter = parseLogFilter(opts, (name) => uidOfAccount(name));
      const n = opts.tail !== undefined ? Number(opts.tail) : filter.since !== null ? Infinity : 10;
      const file = opts.file ?? loadConfig(configPath(cmd)).config.logging.decisions;
      if (file === 'stdout') {
        throw new LeashError(
          'log_sink_stdout',
          'decisions go to stdout (the journal): read them with journalctl -u leash, or pass --file',
          { sink: file },
        );
      }
      const p: Printer = { filter, json: opts.json === true, accountOf };
      let from: FollowFrom | undefined;
      try {
        if (isFiltering(filter)) {
          const t = tailMatching(file, n, filter);
          for (const l of t.lines) emit(l, p);
          from = t;
        } else {
          const t = tailLines(file, n);
          for (const l of t.lines) emit(l, p);
          // Without --follow a last line still being written is shown as it is; a follower prints it once whole.
          if (t.partial && !opts.follow) emit(t.partial, p);
          from = t;
        }
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (!(opts.follow && code === 'ENOENT')) {
          const why =
            code === 'ENOENT'
              ? `no decisions yet: ${file} does not exist (the service creates it when it starts; --follow waits for it)`
              : `cannot read decision log ${file}: ${code ?? (e as Error).message}`;
          throw new LeashError('log_unreadable', why, {
            file,
            errno: code,
          });
        }
      }
      if (opts.follow) await follow(file, from, p);
    });
}

interface LogsOptions {
  follow?: boolean;
  tail?: string;
  file?: string;
  action?: string;
  subject?: string;
  surface?: string;
  since?: string;
  json?: boolean;
}

function uidOfAccount(name: string): number | null {
  try {
    return readPasswd(defaultPasswdSource()).find((e) => e.name === name)?.uid ?? null;
  } catch {
    return null;
  }
}
