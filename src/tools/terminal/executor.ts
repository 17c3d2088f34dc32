/**
 * The only module of the terminal that starts processes. Nothing on explain_command's import
 * graph may import it (tests/unit/tools/terminal/explain.test.ts).
 */
import { spawn } from 'node:child_process';
import { REDACTION_LOOKAHEAD } from './redact.js';
import type { Redactor } from './types.js';

export interface ExecRequest {
  /** Absolute path of the file to execute (the one the policy judged). */
  file: string;
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  /** Byte cap for each of stdout and stderr, applied after redaction. */
  maxOutputBytes: number;
  redact: Redactor;
  /** Process groups still alive, so the server can kill them if it is itself stopped mid-call. */
  live?: Set<number>;
}

export interface ExecOutcome {
  /** Set when the process could not be started (errno name and message). */
  spawnError: { code: string; message: string } | null;
  exit_code: number | null;
  signal: string | null;
  timedOut: boolean;
  truncated: boolean;
  stdout: string;
  stderr: string;
  stdoutBytes: number;
  stderrBytes: number;
  duration_ms: number;
}

export const TRUNCATION_MARKER = (cap: number): string => `\n[TRUNCATED: output exceeded ${cap} bytes]`;

interface Collected {
  chunks: Buffer[];
  kept: number;
  total: number;
}

/** Cuts `buf` to at most `cap` bytes on a UTF-8 character boundary. */
function cutUtf8(buf: Buffer, cap: number): Buffer {
  let end = Math.min(cap, buf.length);
  // Step back over continuation bytes (10xxxxxx) so a character is never split.
  while (end > 0 && end < buf.length && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.subarray(0, end);
}

/**
 * Redacts first, then caps: the collector keeps REDACTION_LOOKAHEAD bytes beyond the cap, so a
 * secret that straddles the cap is whole when the patterns see it and is replaced before anything
 * is cut. A marker cut in half at the cap is dropped rather than left dangling.
 */
export function finishOutput(c: Collected, cap: number, redact: Redactor): { text: string; truncated: boolean } {
  const redacted = Buffer.from(redact(Buffer.concat(c.chunks).toString('utf8')), 'utf8');
  if (redacted.length <= cap && c.total === c.kept) return { text: redacted.toString('utf8'), truncated: false };
  let text = cutUtf8(redacted, cap).toString('utf8');
  const open = text.lastIndexOf('[');
  const tail = open >= 0 ? text.slice(open) : '';
  if (!tail.includes(']') && (tail.startsWith('[REDACTED:') || (tail.length > 0 && '[REDACTED:'.startsWith(tail)))) {
    text = text.slice(0, open);
  }
  return { text: text + TRUNCATION_MARKER(cap), truncated: true };
}

function killGroup(pid: number | undefined): void {
  if (!pid) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // ESRCH: the whole group is already gone.
  }
}

/**
 * Runs argv without a shell, in its own process group, with a scrubbed environment. On timeout, on
 * output past the hard limit, and when the leader exits, the whole group is SIGKILLed, so nothing
 * it started outlives the call (a process that leaves the group with setsid is not covered).
 */
export function execute(req: ExecRequest): Promise<ExecOutcome> {
  const started = process.hrtime.bigint();
  const elapsed = (): number => Number((process.hrtime.bigint() - started) / 1_000_000n);
  const hardLimit = req.maxOutputBytes + REDACTION_LOOKAHEAD;
  return new Promise((resolve) => {
    const out: Collected = { chunks: [], kept: 0, total: 0 };
    const err: Collected = { chunks: [], kept: 0, total: 0 };
    let timedOut = false;
    let overflow = false;
    let settled = false;
    let exitCode: number | null = null;
    let exitSignal: string | null = null;

    let child;
    try {
      child = spawn(req.file, req.argv.slice(1), {
        argv0: req.argv[0],
        cwd: req.cwd,
        env: req.env,
        shell: false,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
        windowsHide: true,
      });
    } catch (e) {
      const ex = e as NodeJS.ErrnoException;
      resolve(failed(ex.code ?? 'EINVAL', ex.message));
      return;
    }
    const pid = child.pid;
    if (pid) req.live?.add(pid);

    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(pid);
    }, req.timeoutMs);

    const collect = (c: Collected) => (chunk: Buffer) => {
      c.total += chunk.length;
      const room = hardLimit - c.kept;
      if (room > 0) {
        const piece = chunk.length <= room ? chunk : chunk.subarray(0, room);
        c.chunks.push(piece);
        c.kept += piece.length;
      }
      if (c.total > hardLimit && !overflow) {
        // Nothing past the cap will be returned; stop the command rather than drain it forever.
        overflow = true;
        killGroup(pid);
      }
    };
    child.stdout!.on('data', collect(out));
    child.stderr!.on('data', collect(err));

    function failed(code: string, message: string): ExecOutcome {
      return {
        spawnError: { code, message },
        exit_code: null,
        signal: null,
        timedOut: false,
        truncated: false,
        stdout: '',
        stderr: '',
        stdoutBytes: 0,
        stderrBytes: 0,
        duration_ms: elapsed(),
      };
    }

    child.on('error', (e: NodeJS.ErrnoException) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      killGroup(pid);
      resolve(failed(e.code ?? 'EIO', e.message));
    });
    child.on('exit', (code, signal) => {
      exitCode = code;
      exitSignal = signal;
      // The leader is done: its group goes too, so a background grandchild holding our pipes open
      // neither outlives the call nor delays 'close' until the timeout.
      killGroup(pid);
    });
    child.on('close', () => {
      if (pid) req.live?.delete(pid);
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      const so = finishOutput(out, req.maxOutputBytes, req.redact);
      const se = finishOutput(err, req.maxOutputBytes, req.redact);
      resolve({
        spawnError: null,
        exit_code: exitCode,
        signal: exitSignal,
        timedOut,
        truncated: overflow || so.truncated || se.truncated,
        stdout: so.text,
        stderr: se.text,
        stdoutBytes: out.total,
        stderrBytes: err.total,
        duration_ms: elapsed(),
      });
    });
  });
}
