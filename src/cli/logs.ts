import fs from 'node:fs';
import type { Command } from 'commander';
import { loadConfig } from '../validate/load.js';
import { LeashError } from '../errors.js';
import { escapeForTerminal } from '../log/escape.js';
import { configPath } from './context.js';

/**
 * The last `n` lines of a file, read backwards in blocks (a decision log can be large). A final line
 * without its newline (being written right now) is returned apart, so a follower can start before it
 * instead of printing it in two pieces.
 */
export function tailLines(file: string, n: number): { lines: string[]; partial: string; end: number } {
  const fd = fs.openSync(file, 'r');
  try {
    const size = fs.fstatSync(fd).size;
    let pos = size;
    const chunks: Buffer[] = [];
    let newlines = 0;
    const block = 64 * 1024;
    // n + 1 newlines guarantee n whole lines (plus a possible partial) are in the chunks read.
    while (pos > 0 && newlines <= n) {
      const len = Math.min(block, pos);
      pos -= len;
      const buf = Buffer.alloc(len);
      fs.readSync(fd, buf, 0, len, pos);
      chunks.unshift(buf);
      for (const b of buf) if (b === 10) newlines++;
    }
    const all = Buffer.concat(chunks).toString('utf8').split('\n');
    const partial = all.pop() ?? '';
    return { lines: n > 0 ? all.slice(-n) : [], partial, end: size - Buffer.byteLength(partial) };
  } finally {
    fs.closeSync(fd);
  }
}

function emit(line: string): void {
  process.stdout.write(`${escapeForTerminal(line)}\n`);
}

/** Polls for appended lines; handles truncation (reads from 0) and rotation (reopens by name). */
async function follow(file: string, start: number): Promise<void> {
  let pos = start;
  let ino: number | null = null;
  try {
    ino = fs.statSync(file).ino;
  } catch {
    /* not there yet */
  }
  let partial = '';
  let stop = false;
  const onSig = () => {
    stop = true;
  };
  process.once('SIGINT', onSig);
  process.once('SIGTERM', onSig);
  while (!stop) {
    let st: fs.Stats | null = null;
    try {
      st = fs.statSync(file);
    } catch {
      st = null;
    }
    if (st) {
      if (st.ino !== ino || st.size < pos) {
        ino = st.ino;
        pos = 0;
        partial = '';
      }
      if (st.size > pos) {
        const fd = fs.openSync(file, 'r');
        try {
          const buf = Buffer.alloc(st.size - pos);
          const got = fs.readSync(fd, buf, 0, buf.length, pos);
          pos += got;
          partial += buf.subarray(0, got).toString('utf8');
        } finally {
          fs.closeSync(fd);
        }
        const parts = partial.split('\n');
        partial = parts.pop() ?? '';
        for (const l of parts) emit(l);
      }
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

export function register(program: Command): void {
  program
    .command('logs')
    .description('print the decision log (control characters and bidi overrides escaped)')
    .option('-f, --follow', 'keep printing lines as they are appended')
    .option('-n, --tail <n>', 'print the last N lines first', '10')
    .option('--file <path>', 'read this file instead of the configured logging.decisions')
    .action(async (opts: { follow?: boolean; tail: string; file?: string }, cmd: Command) => {
      if (!/^\d+$/.test(opts.tail)) {
        throw new LeashError('usage', `--tail must be a non-negative number, not "${opts.tail}"`, { tail: opts.tail });
      }
      const n = Number(opts.tail);
      const file = opts.file ?? loadConfig(configPath(cmd)).config.logging.decisions;
      if (file === 'stdout') {
        throw new LeashError(
          'log_sink_stdout',
          'decisions go to stdout (the journal): read them with journalctl -u leash, or pass --file',
          { sink: file },
        );
      }
      let end = 0;
      try {
        const t = tailLines(file, n);
        for (const l of t.lines) emit(l);
        // Without --follow a last line still being written is shown as it is; a follower prints it once whole.
        if (t.partial && !opts.follow) emit(t.partial);
        end = t.end;
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
      if (opts.follow) await follow(file, end);
    });
}
