/**
 * Black-box harness for `leash mcp`: runs the built CLI as a subprocess in front of a fake server
 * that records every line it receives, and collects stdout lines, stderr, the decision log and
 * the exit status.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { onTestFinished } from 'vitest';

export const ROOT = path.resolve(import.meta.dirname, '..', '..');
export const CLI = path.join(ROOT, 'dist', 'src', 'cli', 'main.js');
export const FAKE = path.join(ROOT, 'tests', 'fixtures', 'mcp', 'fake-server.mjs');

export function tmpdir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-mcp-'));
  onTestFinished(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

export interface GateRun {
  proc: ChildProcess;
  dir: string;
  record: string;
  logFile: string;
  /** Sends one line (a string is written as-is plus LF; an object is JSON.stringified). */
  send(line: string | Buffer | object): void;
  /** Resolves with the next stdout line parsed as JSON (rejects after ms). */
  next(ms?: number): Promise<unknown>;
  /** Resolves with the response whose id is `id` (exactly, by type). */
  answer(id: unknown, ms?: number): Promise<Record<string, unknown>>;
  end(): void;
  exited: Promise<number>;
  stdout(): unknown[];
  /** The lines the gate wrote to the client, as written. */
  stdoutRaw(): string[];
  stderr(): string;
  /** Lines the fake server received, parsed (null for unparsable lines). */
  received(): unknown[];
  log(): Record<string, unknown>[];
}

export interface GateOpts {
  policy?: string | null;
  mode?: string;
  args?: string[];
  server?: string[];
  env?: NodeJS.ProcessEnv;
  /** Extra options before `--`. */
  cliArgs?: string[];
  /** A command the gate runs under (e.g. a wrapper giving it a controlling terminal). */
  wrapper?: string[];
}

export function startGate(o: GateOpts = {}): GateRun {
  const dir = tmpdir();
  const record = path.join(dir, 'received.jsonl');
  const logFile = path.join(dir, 'decisions.jsonl');
  const args = [CLI, 'mcp'];
  if (o.policy !== null) {
    const pf = path.join(dir, 'policy.yaml');
    fs.writeFileSync(pf, o.policy ?? 'tools: { mode: blacklist }\n');
    args.push('--policy', pf, '--log', logFile);
  }
  args.push(...(o.cliArgs ?? []), '--', ...(o.server ?? [process.execPath, FAKE]));
  const [bin, ...pre] = [...(o.wrapper ?? []), process.execPath];
  const proc = spawn(bin!, [...pre, ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, FAKE_RECORD: record, FAKE_MODE: o.mode ?? '', ...o.env },
  });
  onTestFinished(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  });
  const lines: unknown[] = [];
  const rawLines: string[] = [];
  let taken = 0;
  let waiters: (() => void)[] = [];
  let buf = '';
  let err = '';
  proc.stdout!.on('data', (c: Buffer) => {
    buf += c.toString('utf8');
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const l = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      // Every line the gate writes must be pure ASCII compact JSON.
      if (!/^[\x20-\x7e]*$/.test(l)) throw new Error(`non-ASCII output line: ${l}`);
      rawLines.push(l);
      lines.push(JSON.parse(l));
      const w = waiters;
      waiters = [];
      w.forEach((f) => f());
    }
  });
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString('utf8')));
  proc.stdin!.on('error', () => undefined);
  const exited = new Promise<number>((r) =>
    proc.on('exit', (code, sig) => r(code ?? (sig ? 128 + (os.constants.signals[sig] ?? 0) : -1))),
  );
  const waitFor = <T>(pick: () => T | undefined, ms: number): Promise<T> =>
    new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`timed out; stdout=${JSON.stringify(lines)} stderr=${err}`)), ms);
      const check = () => {
        const v = pick();
        if (v !== undefined) {
          clearTimeout(t);
          resolve(v);
        } else waiters.push(check);
      };
      check();
    });
  return {
    proc,
    dir,
    record,
    logFile,
    send(line) {
      const b = Buffer.isBuffer(line) ? line : Buffer.from(typeof line === 'string' ? line : JSON.stringify(line));
      proc.stdin!.write(Buffer.concat([b, Buffer.from('\n')]));
    },
    // Waits, not targets: a gate and its server are two Node processes, which on a loaded machine take seconds to start.
    next(ms = 15_000) {
      return waitFor(() => (taken < lines.length ? lines[taken++] : undefined), ms);
    },
    answer(id, ms = 15_000) {
      return waitFor(() => {
        const hit = lines.find((l) => {
          const o = l as Record<string, unknown>;
          return o && typeof o === 'object' && !Array.isArray(o) && 'id' in o && o.id === id && !('method' in o);
        });
        return hit as Record<string, unknown> | undefined;
      }, ms);
    },
    end() {
      proc.stdin!.end();
    },
    exited,
    stdout: () => lines,
    stdoutRaw: () => rawLines,
    stderr: () => err,
    received() {
      if (!fs.existsSync(record)) return [];
      return fs
        .readFileSync(record, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => {
          try {
            return JSON.parse(l);
          } catch {
            return null;
          }
        });
    },
    log() {
      if (!fs.existsSync(logFile)) return [];
      return fs
        .readFileSync(logFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    },
  };
}

export const init = (id: unknown = 0) => ({
  jsonrpc: '2.0',
  id,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
});
export const call = (id: unknown, name: string, args?: unknown) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: args === undefined ? { name } : { name, arguments: args },
});

/** The tools/call names the server received. */
export function calledTools(run: GateRun): string[] {
  return run
    .received()
    .filter(
      (m): m is { method: string; params: { name: string } } =>
        !!m && (m as { method?: string }).method === 'tools/call',
    )
    .map((m) => m.params.name);
}
