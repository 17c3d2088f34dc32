/**
 * The MCP stdio gate: spawns the server, relays newline-delimited JSON-RPC both ways, parses every
 * message strictly and forwards only its own re-serialisation, polices tool calls through a judge,
 * and ends with an exit status a supervisor can rely on (0 clean, 3 the server failed, 143/129
 * stopped by a signal).
 *
 * This file starts the server, holds the one per-gate state object every part reads and writes,
 * and wires the pipes to the parts in gate/: output.ts (line limit, queues, flushing,
 * back-pressure), client.ts (client → server: parsed, judged, forwarded or answered), server.ts
 * (server → client, tools/list filtering), deadlines.ts (per-request time-outs), lifecycle.ts
 * (shutdown, exit status, signals). A whole `leash mcp` run is ./run.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { nativeAnswerReader, nativeLineScanner, type AnswerReader, type LineScanner } from './scan.js';
import {
  interrupt,
  onClientEnd,
  onClientError,
  onOutputError,
  onServerExit,
  onServerOutEnd,
  onSpawnError,
  terminate,
} from './lifecycle.js';
import { clientChunk, clientLineTooLong, handleClientLine } from './client.js';
import { flushAll, MAX_LINE, OutQueue } from './output.js';
import { handleServerLine, serverChunk, serverLineTooLong } from './server.js';
import type { GateJudge, PendingAudit } from '../judge/judge.js';
import type { JsonValue } from '../../formats/json.js';
import { LineReader, Sequencer } from '../../formats/lines.js';
import { procCwd, ServerModel } from '../judge/operations/model.js';
import type { GateObserver, McpGate, McpGateOptions } from './types.js';

export { MAX_LINE } from './output.js';
export type { GateObserver, McpGate, McpGateOptions } from './types.js';

/** Starts the server and the relay. */
export function createMcpGate(o: McpGateOptions): McpGate {
  const scanner = o.scanner === undefined ? nativeLineScanner() : o.scanner;
  const [cmd, ...args] = o.command;
  const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'inherit'], env: o.env ?? process.env });
  const g = new GateState(o, child, scanner);
  child.on('error', (e: NodeJS.ErrnoException) => onSpawnError(g, e));
  g.sin.on('error', () => {
    /* EPIPE: the server is gone; 'exit' tells the rest */
  });
  o.output.on('error', () => onOutputError(g));
  child.on('exit', () => onServerExit(g));
  g.sout.on('data', (c: Buffer) => serverChunk(g, c));
  g.sout.on('end', () => onServerOutEnd(g));
  g.sout.on('error', () => undefined);
  o.input.on('data', g.onInput);
  o.input.on('end', () => onClientEnd(g));
  o.input.on('error', () => onClientError(g));
  return {
    done: g.done,
    terminate: (code: number) => terminate(g, code),
    interrupt: () => interrupt(g),
  };
}

/** A client request the server has taken and the gate waits an answer for. */
export interface Pending {
  id: JsonValue;
  method: string;
  name?: string;
  args?: JsonValue;
  /** The call's audit record, waiting for its outcome. */
  audit?: PendingAudit;
  /** A list_allowed_directories call: the model's epoch when it was sent (its answer updates the model). */
  dirsEpoch?: number;
  /** Takes what the rules protect out of a listing answer (the judgment's `filter`). */
  filter?: (result: JsonValue) => boolean | Promise<boolean>;
  /** When the gate stops waiting (performance.now() ms; Infinity with no timeout). */
  deadline: number;
}

/** What handling one message produces for the other side: a message, or nothing. */
export type Out = JsonValue | null;

/**
 * The one object every part of the gate reads and writes, created per gate by createMcpGate: the
 * server process and its pipes, the requests in flight, the output queues, the timers, and the
 * flags the session's end is decided from. The parts are plain functions taking it first.
 */
export class GateState {
  readonly o: McpGateOptions;
  readonly judge: GateJudge;
  readonly observer: GateObserver | undefined;
  readonly scanner: LineScanner | null;
  /** The judge's native judge of plain tools/calls (none with an observer: it reads every call's arguments). */
  readonly native: NonNullable<GateJudge['native']> | null;
  /** The native reader of plain answers (none without the scanner, or with an observer: it reads every answer). */
  readonly answers: AnswerReader | null;
  readonly timeoutMs: number;

  // ---- the server ----
  readonly child: ChildProcess;
  readonly sin: Writable;
  readonly sout: Readable;
  spawnFailed = false;
  serverExited = false;
  serverOutEnded = false;

  // ---- requests ----
  /** Client requests the server has taken, by idKey. */
  readonly pending = new Map<string, Pending>();
  /**
   * Asked calls the service holds for a human, by idKey: not sent to the server (yet); relayed when
   * allowed, answered with the refusal otherwise. Their ids are in use meanwhile.
   */
  readonly held = new Map<string, { id: JsonValue; cancel(): void }>();
  /** Requests the gate stopped waiting for (cancelled, timed out): a late answer is dropped quietly. */
  readonly retired = new Set<string>();
  /** Server-to-client requests awaiting the client's answer: idKey → the id as sent. */
  readonly serverPending = new Map<string, JsonValue>();
  /** Which of them are roots/list: the client's answer moves the server, so the model reads it first. */
  readonly rootsAsked = new Set<string>();
  /** The gate's model of the server (where its relative paths land). */
  readonly model: ServerModel;
  clientSent = 0;
  timeouts = 0;

  // ---- framing ----
  readonly clientSeq: Sequencer<GateState, Buffer>;
  readonly serverSeq: Sequencer<GateState, Buffer>;
  readonly clientLines: LineReader;
  readonly serverLines: LineReader;
  readonly serverOut = new OutQueue();
  readonly clientOut = new OutQueue();
  flushQueued = false;
  /** When each write to the server not yet taken by the kernel was made (performance.now() ms). */
  readonly unflushed: number[] = [];
  stallTimer: NodeJS.Timeout | null = null;
  /** Our stdout's reader went away. */
  outClosed = false;
  readonly flushAll: () => void;
  readonly onFlushed: () => void;
  readonly onInput: (chunk: Buffer) => void;

  // ---- lifecycle ----
  clientEnded = false;
  failed = false;
  failReason = '';
  signalCode: number | null = null;
  shuttingDown = false;
  finished = false;
  deadlineTimer: NodeJS.Timeout | null = null;
  termTimer: NodeJS.Timeout | null = null;
  killTimer: NodeJS.Timeout | null = null;
  readonly done: Promise<number>;
  resolveDone!: (code: number) => void;

  constructor(o: McpGateOptions, child: ChildProcess, scanner: LineScanner | null) {
    this.o = o;
    this.judge = o.judge;
    this.observer = o.observer;
    this.scanner = scanner;
    this.native = o.observer === undefined ? (o.judge.native ?? null) : null;
    this.answers =
      scanner === null || o.observer !== undefined ? null : o.answers === undefined ? nativeAnswerReader() : o.answers;
    this.timeoutMs = o.timeoutMs;
    this.child = child;
    this.sin = child.stdin!;
    this.sout = child.stdout!;
    // The server starts in the gate's directory; /proc says where it is when a wrapper moved it.
    this.model = new ServerModel(o.command, process.cwd(), procCwd(child.pid));
    o.judge.attachModel?.(this.model);
    this.clientSeq = new Sequencer<GateState, Buffer>(handleClientLine, this);
    this.serverSeq = new Sequencer<GateState, Buffer>(handleServerLine, this);
    this.clientLines = new LineReader(
      (l) => this.clientSeq.push(l),
      () => clientLineTooLong(this),
      { maxBytes: MAX_LINE },
    );
    this.serverLines = new LineReader(
      (l) => this.serverSeq.push(l),
      () => serverLineTooLong(this),
      { maxBytes: MAX_LINE },
    );
    this.flushAll = () => flushAll(this);
    this.onFlushed = () => {
      this.unflushed.shift();
    };
    this.onInput = (c: Buffer) => clientChunk(this, c);
    this.done = new Promise<number>((r) => (this.resolveDone = r));
  }

  /** A human-readable line on errout (never the protocol). */
  say(line: string): void {
    try {
      this.o.errout.write(`leash mcp: ${line}\n`);
    } catch {
      /* stderr closed: the line has nowhere to go */
    }
  }

  retire(k: string): void {
    // Bounded: a client cancelling for ever must not grow the gate without limit.
    if (this.retired.size >= 10_000) this.retired.delete(this.retired.values().next().value!);
    this.retired.add(k);
  }
}
