/**
 * The one object every part of the gate reads and writes, created per gate by createMcpGate: the
 * server process and its pipes, the requests in flight, the output queues, the timers, and the
 * flags the session's end is decided from. The parts are plain functions taking it first.
 */
import { clientLineTooLong, handleClientLine } from './client.js';
import { flushAll } from './output.js';
import { handleServerLine, serverLineTooLong } from './server.js';
import type { ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { GateJudge, PendingAudit } from '../judge/judge.js';
import type { JsonValue } from '../../formats/json.js';
import type { LineScanner } from './scan.js';
import { LineReader, Sequencer } from '../../formats/lines.js';
import { procCwd, ServerModel } from '../judge/operations/model.js';
import { MAX_LINE, OutQueue } from './lines.js';
import type { GateObserver, McpGateOptions } from './types.js';

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

export class GateState {
  readonly o: McpGateOptions;
  readonly judge: GateJudge;
  readonly observer: GateObserver | undefined;
  readonly scanner: LineScanner | null;
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
    this.onInput = (c: Buffer) => this.clientLines.push(c);
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
