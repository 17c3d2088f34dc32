/** The gate's public interface: its options, the observer `leash mcp --learn` plugs in, the handle. */
import type { Readable, Writable } from 'node:stream';
import type { GateJudge } from '../judge/judge.js';
import type { JsonValue } from '../../formats/json.js';
import type { AnswerReader, LineScanner } from './scan.js';

export interface GateObserver {
  /** A tools/call the server answered (ok = a result that is not an MCP isError). */
  onCall?(name: string, args: JsonValue | undefined, ok: boolean): void;
  /** A tools/list page as the server sent it. */
  onToolsList?(names: string[]): void;
  /** The server's initialize result. */
  onInitialize?(result: JsonValue): void;
}

export interface McpGateOptions {
  judge: GateJudge;
  /** The server command and its arguments. */
  command: string[];
  /** Per-request timeout, and how long a message may wait to be taken by the server (0 = never). */
  timeoutMs: number;
  /** How long the server gets to exit after its stdin is closed (0 = stop it at once). */
  graceMs: number;
  input: Readable;
  output: Writable;
  /** Human-readable lines (never the protocol). */
  errout: Writable;
  observer?: GateObserver;
  /** Environment of the server (default: ours). */
  env?: NodeJS.ProcessEnv;
  /** How long a server ignoring SIGTERM gets before SIGKILL. */
  killAfterMs?: number;
  /**
   * The native pre-check that lets canonical lines through without a re-write (default: the addon's
   * when it loads). `null` parses and re-writes every line (tests compare the two paths).
   */
  scanner?: LineScanner | null;
  /** The native reader of plain answers (default: the addon's when the scanner is on; `null`: none). */
  answers?: AnswerReader | null;
}

export interface McpGate {
  /** Resolves with the exit status once the session is over and the server is gone. */
  readonly done: Promise<number>;
  /** SIGTERM/SIGHUP: wind down like a leaving client, then exit 128+n; a second call kills at once. */
  terminate(code: number): void;
  /** SIGINT: stop the server at once; exit 0. */
  interrupt(): void;
}
