/**
 * The MCP stdio gate: spawns the server, relays newline-delimited JSON-RPC both ways, parses every
 * message strictly and forwards only its own re-serialisation, polices tool calls through a judge,
 * and ends with an exit status a supervisor can rely on (0 clean, 3 the server failed, 143/129
 * stopped by a signal).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import type { Readable, Writable } from 'node:stream';
import type { GateJudge, GateJudgment } from './judge.js';
import { idKey, isObject, JsonError, parseStrict, stringifyAscii, type JsonObject, type JsonValue } from './json.js';
import { ENVELOPE } from './policy.js';
import { normalizeToolName, otherSpellingOf } from './names.js';
import { nativeLineScanner, plainRequest, plainResponseKey, type LineScanner } from './scan.js';

/** Lines longer than this are refused (and skipped up to the next newline). */
export const MAX_LINE = 64 * 1024 * 1024;

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
}

export interface McpGate {
  /** Resolves with the exit status once the session is over and the server is gone. */
  readonly done: Promise<number>;
  /** SIGTERM/SIGHUP: wind down like a leaving client, then exit 128+n; a second call kills at once. */
  terminate(code: number): void;
  /** SIGINT: stop the server at once; exit 0. */
  interrupt(): void;
}

interface Pending {
  id: JsonValue;
  method: string;
  name?: string;
  args?: JsonValue;
  /** When the gate stops waiting (performance.now() ms; Infinity with no timeout). */
  deadline: number;
}

type Out = JsonValue | null;

const rpcError = (id: JsonValue, code: number, message: string, data?: JsonValue): JsonObject => {
  const err: JsonObject = { code, message };
  if (data !== undefined) err.data = data;
  return { jsonrpc: '2.0', id, error: err };
};

const has = (o: JsonObject, k: string) => Object.prototype.hasOwnProperty.call(o, k);

function printable(b: Buffer | string): string {
  const s = typeof b === 'string' ? b : b.toString('utf8');
  const t = s.length > 200 ? `${s.slice(0, 200)}…` : s;
  return JSON.stringify(t)
    .slice(1, -1)
    .replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Splits a byte stream into LF-terminated lines without decoding (UTF-8 is validated per line). */
class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;
  private skipping = false;
  constructor(
    private onLine: (line: Buffer) => void,
    private onOversize: () => void,
  ) {}
  push(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      if (nl < 0) break;
      const piece = chunk.subarray(start, nl);
      start = nl + 1;
      if (this.skipping) {
        this.skipping = false;
        this.parts = [];
        this.size = 0;
        continue;
      }
      let line: Buffer;
      if (this.size === 0) line = piece;
      else {
        this.parts.push(piece);
        line = Buffer.concat(this.parts);
        this.parts = [];
        this.size = 0;
      }
      this.onLine(line);
    }
    if (start < chunk.length && !this.skipping) {
      const rest = chunk.subarray(start);
      this.size += rest.length;
      if (this.size > MAX_LINE) {
        this.skipping = true;
        this.parts = [];
        this.size = 0;
        this.onOversize();
      } else this.parts.push(Buffer.from(rest));
    }
  }
  /** The final line without a LF (a client that ends without one still sent it). */
  end(): void {
    if (this.size > 0 && !this.skipping) {
      const line = Buffer.concat(this.parts);
      this.parts = [];
      this.size = 0;
      this.onLine(line);
    }
  }
}

/** Runs handlers one at a time in arrival order; synchronous handlers never allocate a promise. */
class Sequencer<T> {
  private queue: T[] = [];
  private busy = false;
  onIdle: (() => void) | null = null;
  constructor(private handle: (item: T) => void | Promise<void>) {}
  get idle(): boolean {
    return !this.busy && this.queue.length === 0;
  }
  push(item: T): void {
    if (this.busy) {
      this.queue.push(item);
      return;
    }
    this.run(item);
  }
  private run(item: T | undefined): void {
    while (item !== undefined) {
      const r = this.handle(item);
      if (r) {
        this.busy = true;
        r.then(
          () => this.resume(),
          () => this.resume(),
        );
        return;
      }
      item = this.queue.shift();
    }
    this.onIdle?.();
  }
  private resume(): void {
    this.busy = false;
    this.run(this.queue.shift());
  }
}

/**
 * Lines queued for one pipe: the gate's own writing (ASCII strings) and lines forwarded as they
 * came (Buffers), written out as one Buffer.
 */
class OutQueue {
  private parts: (Buffer | string)[] = [];
  private bytes = 0;
  get empty(): boolean {
    return this.parts.length === 0;
  }
  /** Adds one line (without its LF); strings are pure ASCII (stringifyAscii). */
  push(line: Buffer | string): void {
    this.parts.push(line);
    this.bytes += line.length + 1;
  }
  clear(): void {
    this.parts = [];
    this.bytes = 0;
  }
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.bytes);
    let off = 0;
    for (const p of this.parts) {
      off += typeof p === 'string' ? out.write(p, off, 'latin1') : p.copy(out, off);
      out[off++] = 0x0a;
    }
    this.clear();
    return out;
  }
}

function envelopeProblem(o: JsonObject): string | null {
  for (const k in o) {
    const c = otherSpellingOf(k, ENVELOPE);
    if (c) return `member ${JSON.stringify(k)} is another spelling of ${c}`;
  }
  if (o.jsonrpc !== '2.0') return 'jsonrpc must be "2.0"';
  return null;
}

const LIST_MEMBERS = ['tools', 'nextCursor'];
const NAME = ['name'];

const validId = (id: JsonValue | undefined): boolean => idKey(id ?? null) !== null;

/** Starts the server and the relay. */
export function createMcpGate(o: McpGateOptions): McpGate {
  const { judge, errout } = o;
  const scanner = o.scanner === undefined ? nativeLineScanner() : o.scanner;
  const timeoutMs = o.timeoutMs;
  const pending = new Map<string, Pending>();
  /** Requests the gate stopped waiting for (cancelled, timed out): a late answer is dropped quietly. */
  const retired = new Set<string>();
  const retire = (k: string) => {
    // Bounded: a client cancelling for ever must not grow the gate without limit.
    if (retired.size >= 10_000) retired.delete(retired.values().next().value!);
    retired.add(k);
  };
  const serverPending = new Map<string, JsonValue>();
  let clientSent = 0;
  let clientEnded = false;
  let failed = false;
  let failReason = '';
  let timeouts = 0;
  let signalCode: number | null = null;
  let shuttingDown = false;
  let finished = false;
  let serverExited = false;
  let serverOutEnded = false;
  let resolveDone!: (code: number) => void;
  const done = new Promise<number>((r) => (resolveDone = r));

  const say = (line: string) => {
    try {
      errout.write(`leash mcp: ${line}\n`);
    } catch {
      /* stderr closed: the line has nowhere to go */
    }
  };

  // ---- the server ----
  const [cmd, ...args] = o.command;
  const child: ChildProcess = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'inherit'], env: o.env ?? process.env });
  const sin = child.stdin!;
  const sout = child.stdout!;
  let spawnFailed = false;
  child.on('error', (e: NodeJS.ErrnoException) => {
    if (child.pid === undefined) {
      spawnFailed = true;
      say(`cannot start the server ${JSON.stringify(cmd)}: ${e.code ?? e.message}`);
      finish(2);
    }
  });
  sin.on('error', () => {
    /* EPIPE: the server is gone; 'exit' tells the rest */
  });

  // Writes to the server with stall detection: each write's callback fires when the kernel took it.
  const unflushed: number[] = [];
  let stallTimer: NodeJS.Timeout | null = null;
  const onFlushed = () => {
    unflushed.shift();
  };
  const checkStall = () => {
    stallTimer = null;
    if (unflushed.length === 0 || finished) return;
    const age = performance.now() - unflushed[0]!;
    if (age >= timeoutMs) stalled();
    else stallTimer = setTimeout(checkStall, timeoutMs - age);
  };
  // Output is coalesced per input chunk: every message produced while handling one chunk read from
  // either side goes out in one write per pipe, in a microtask once the chunk's lines are handled
  // (a write per message costs a syscall each and dominated the gate's CPU). Waiting for the end
  // of the event-loop turn instead measured slower: the next process in the pipeline then starts
  // later. The judge's held-back decision-log lines are written first, so an allowed call's line
  // is in the log before the call reaches the server.
  const serverOut = new OutQueue();
  const clientOut = new OutQueue();
  let flushQueued = false;
  const flushAll = () => {
    flushQueued = false;
    judge.flush?.();
    flushServer();
    flushClient();
  };
  const scheduleFlush = () => {
    if (!flushQueued) {
      flushQueued = true;
      queueMicrotask(flushAll);
    }
  };
  function flushServer(): void {
    if (serverOut.empty) return;
    if (serverExited || sin.destroyed || sin.writableEnded) return serverOut.clear();
    const s = serverOut.take();
    if (timeoutMs > 0) {
      unflushed.push(performance.now());
      if (stallTimer === null) stallTimer = setTimeout(checkStall, timeoutMs);
      sin.write(s, onFlushed);
    } else sin.write(s);
  }
  /** Queues a message for the server: `raw` is its line as received when that is canonical already. */
  const toServer = (v: JsonValue, raw: Buffer | null) => {
    serverOut.push(raw ?? stringifyAscii(v));
    scheduleFlush();
  };

  let outClosed = false;
  o.output.on('error', () => {
    // Our reader went away (| head): nobody to answer; end quietly.
    outClosed = true;
    killServer('SIGKILL');
    finish(0);
  });
  function flushClient(): void {
    if (clientOut.empty || outClosed) return;
    o.output.write(clientOut.take());
  }
  const toClient = (v: JsonValue, raw: Buffer | null = null) => {
    if (outClosed) return;
    clientOut.push(raw ?? stringifyAscii(v));
    scheduleFlush();
  };

  const failPending = (message: string, reason: 'server_closed' | 'server_stalled') => {
    for (const [k, p] of pending) {
      pending.delete(k);
      judge.event({ reason, method: p.method });
      toClient(rpcError(p.id, -32603, message));
    }
  };

  function stalled(): void {
    if (finished) return;
    failed = true;
    failReason = `the server stopped reading its input for ${timeoutMs} ms`;
    failPending('server stopped reading its input', 'server_stalled');
    killServer('SIGKILL');
    finish(3);
  }

  function killServer(sig: NodeJS.Signals): void {
    if (!serverExited && child.pid !== undefined) {
      try {
        child.kill(sig);
      } catch {
        /* already gone */
      }
    }
  }

  // ---- client → server ----
  const clientSeq = new Sequencer<Buffer>(handleClientLine);
  const clientLines = new LineSplitter(
    (l) => clientSeq.push(l),
    () => {
      judge.event({ reason: 'protocol_client', rejected: 'client', code: 'line_too_long' });
      toClient(rpcError(null, -32700, 'parse error: line_too_long'));
    },
  );

  function refuseClient(id: JsonValue, code: number, what: string, line: Buffer | string, method?: string): void {
    judge.event({
      reason: 'protocol_client',
      rejected: 'client',
      code: what,
      method,
      line: typeof line === 'string' ? line : line.toString('utf8'),
    });
    toClient(rpcError(id, code, code === -32700 ? `parse error: ${what}` : `invalid request: ${what}`));
  }

  function handleClientLine(line: Buffer): void | Promise<void> {
    if (line.length === 0) return;
    clientSent++;
    // A line already in the gate's own form is forwarded as it came (after the same checks).
    const raw = scanner !== null && scanner.scan(line) ? line : null;
    if (raw !== null) {
      const fast = plainRequest(line, scanner!.facts);
      if (fast !== null) {
        // The envelope was checked natively; only params are built (the judge reads them).
        let params: JsonValue | undefined;
        try {
          params = fast.params === null ? undefined : parseStrict(line.subarray(fast.params[0], fast.params[1]));
        } catch {
          params = null; // cannot happen for a scanned line; the full path below decides
        }
        if (params !== null) {
          const v: JsonObject = { jsonrpc: '2.0', method: fast.method };
          if (params !== undefined) v.params = params;
          if (fast.id === undefined) return clientNotification(v, fast.method, line, raw);
          v.id = fast.id;
          return clientCall(v, fast.method, fast.key!, line, raw);
        }
      }
    }
    let v: JsonValue;
    try {
      v = parseStrict(line);
    } catch (e) {
      if (e instanceof JsonError) return refuseClient(null, -32700, e.code, line);
      throw e;
    }
    if (Array.isArray(v)) {
      if (v.length === 0) return refuseClient(null, -32600, 'empty_batch', line);
      // A batch is split: each element is judged and forwarded on its own.
      let chain: Promise<void> | null = null;
      for (const el of v) {
        if (chain) chain = chain.then(() => handleClientMessage(el, line, null));
        else {
          const r = handleClientMessage(el, line, null);
          if (r) chain = r;
        }
      }
      return chain ?? undefined;
    }
    return handleClientMessage(v, line, raw);
  }

  function handleClientMessage(v: JsonValue, line: Buffer, raw: Buffer | null): void | Promise<void> {
    if (!isObject(v)) return refuseClient(null, -32600, 'not_an_object', line);
    const idTrusted = has(v, 'id') && validId(v.id) ? (v.id as JsonValue) : null;
    const problem = envelopeProblem(v);
    if (problem)
      return refuseClient(idTrusted, -32600, problem.startsWith('member') ? 'other_spelling' : 'bad_jsonrpc', line);
    if (has(v, 'method')) {
      if (typeof v.method !== 'string') return refuseClient(idTrusted, -32600, 'method_not_string', line);
      if (has(v, 'result') || has(v, 'error')) return refuseClient(idTrusted, -32600, 'request_and_response', line);
      if (has(v, 'params') && !isObject(v.params) && !Array.isArray(v.params))
        return refuseClient(idTrusted, -32600, 'bad_params', line);
      const method = v.method;
      if (!has(v, 'id')) return clientNotification(v, method, line, raw);
      if (v.id === null) return refuseClient(null, -32600, 'null_id', line, method);
      const key = idKey(v.id!);
      if (key === null) return refuseClient(null, -32600, 'bad_id', line, method);
      return clientCall(v, method, key, line, raw);
    }
    // A response to a server-to-client request.
    if (!has(v, 'id') || !validId(v.id)) return refuseClient(null, -32600, 'response_without_id', line);
    if (has(v, 'result') === has(v, 'error'))
      return refuseClient(idTrusted, -32600, 'not_exactly_one_of_result_error', line);
    if (has(v, 'error') && !isObject(v.error)) return refuseClient(idTrusted, -32600, 'bad_error', line);
    const key = idKey(v.id!)!;
    if (!serverPending.has(key)) {
      judge.event({
        reason: 'protocol_client',
        rejected: 'client',
        code: 'unknown_response_id',
        line: line.toString('utf8'),
      });
      say(`dropped a client response to an id the server never asked: ${printable(line)}`);
      return;
    }
    serverPending.delete(key);
    toServer(v, raw);
  }

  /** A request with a valid envelope: judged, then forwarded or answered with the denial. */
  function clientCall(
    v: JsonObject,
    method: string,
    key: string,
    line: Buffer,
    raw: Buffer | null,
  ): void | Promise<void> {
    if (pending.has(key)) return refuseClient(v.id!, -32600, 'id_in_use', line, method);
    const j = judge.judge(method, v.params, false);
    if (j instanceof Promise)
      return j.then(
        (jj) => clientRequest(v, key, jj, raw),
        () => clientRequest(v, key, null, raw),
      );
    return clientRequest(v, key, j, raw);
  }

  function clientRequest(v: JsonObject, key: string, j: GateJudgment | null, raw: Buffer | null): void {
    const method = v.method as string;
    if (j === null) {
      // The judge failed (the service went away): fail closed.
      toClient(rpcError(v.id!, -32001, 'denied by leash: engine_error', { reason: 'engine_error' }));
      return;
    }
    if (j.action === 'deny') {
      const data: JsonObject = { reason: j.reason };
      if (j.ref) data.ref = j.ref;
      toClient(rpcError(v.id!, j.code, j.message, data));
      return;
    }
    const fm = normalizeToolName(method);
    const p: Pending = { id: v.id!, method: fm, deadline: timeoutMs > 0 ? performance.now() + timeoutMs : Infinity };
    if (o.observer && fm === 'tools/call' && isObject(v.params)) {
      p.name = typeof v.params.name === 'string' ? v.params.name : undefined;
      p.args = v.params.arguments;
    }
    pending.set(key, p);
    if (timeoutMs > 0 && deadlineTimer === null) armDeadline(timeoutMs);
    retired.delete(key);
    toServer(v, raw);
  }

  function clientNotification(v: JsonObject, method: string, line: Buffer, raw: Buffer | null): void | Promise<void> {
    const fm = normalizeToolName(method);
    if (fm === 'notifications/cancelled' && isObject(v.params) && has(v.params, 'requestId')) {
      const k = idKey(v.params.requestId!);
      const p = k ? pending.get(k) : undefined;
      if (p && p.method === 'initialize') {
        // MCP does not let a client cancel initialize: not passed on, logged, and (a notification)
        // never answered.
        judge.event({
          reason: 'protocol_client',
          rejected: 'client',
          code: 'cancel_initialize',
          method,
          line: line.toString('utf8'),
        });
        return;
      }
    }
    const go = (j: GateJudgment | null) => {
      if (j === null || j.action === 'deny') return; // a denied notification is logged and dropped
      if (fm === 'notifications/cancelled' && isObject(v.params) && has(v.params, 'requestId')) {
        const k = idKey(v.params.requestId!);
        const p = k ? pending.get(k) : undefined;
        if (k && p) {
          pending.delete(k);
          retire(k);
        }
      }
      toServer(v, raw);
      maybeShutdown();
    };
    const j = judge.judge(method, v.params, true);
    if (j instanceof Promise) return j.then(go, () => go(null));
    go(j);
  }

  // One timer for every pending request: all share the same timeout, so the oldest entry of
  // `pending` (a Map keeps insertion order) always has the earliest deadline.
  let deadlineTimer: NodeJS.Timeout | null = null;
  function armDeadline(ms: number): void {
    deadlineTimer = setTimeout(expire, Math.max(1, Math.ceil(ms)));
  }
  function expire(): void {
    deadlineTimer = null;
    if (finished) return;
    const now = performance.now();
    // A request is "unanswered" only if the server took it. When output to the server has been
    // stuck for most of the timeout, the server stopped reading: that is the stall, not a time-out.
    if (unflushed.length > 0 && now - unflushed[0]! >= timeoutMs / 2) return stalled();
    for (const [key, p] of pending) {
      if (p.deadline > now) {
        armDeadline(p.deadline - now);
        break;
      }
      timedOut(key, p);
    }
  }

  function timedOut(key: string, p: Pending): void {
    pending.delete(key);
    retire(key);
    timeouts++;
    failed = true;
    judge.event({ reason: 'server_timeout', method: p.method });
    toClient(rpcError(p.id, -32603, 'server timed out'));
    maybeShutdown();
  }

  // ---- server → client ----
  const serverSeq = new Sequencer<Buffer>(handleServerLine);
  const serverLines = new LineSplitter(
    (l) => serverSeq.push(l),
    () => {
      judge.event({ reason: 'protocol_server', rejected: 'server', code: 'line_too_long' });
      say('dropped an over-long line from the server');
    },
  );

  function refuseServer(what: string, line: Buffer, answers: string | null): Out {
    judge.event({ reason: 'protocol_server', rejected: 'server', code: what, line: line.toString('utf8') });
    const p = answers ? pending.get(answers) : undefined;
    if (answers && p) {
      pending.delete(answers);
      maybeShutdownSoon();
      return rpcError(p.id, -32603, `bad response from server: ${what}`);
    }
    say(`dropped a message from the server (${what}): ${printable(line)}`);
    return null;
  }

  function handleServerLine(line: Buffer): void | Promise<void> {
    if (line.length === 0) return;
    // The common case: a canonical response to a pending request whose result the gate neither
    // filters nor observes is checked natively and forwarded as it came, without building it.
    if (scanner !== null && !o.observer && scanner.scan(line)) {
      const key = plainResponseKey(line, scanner.facts);
      const p = key === null ? undefined : pending.get(key);
      if (p && !(p.method === 'tools/list' && judge.hideDenied)) {
        pending.delete(key!);
        toClient(null, line);
        maybeShutdown();
        return;
      }
    }
    let v: JsonValue;
    try {
      v = parseStrict(line);
    } catch (e) {
      if (!(e instanceof JsonError)) throw e;
      // Not JSON at all is a banner (console.log on stdout): skipped, never charged to a request.
      // JSON that a lenient reader accepts but we refuse fails the request it claims to answer.
      let lenient: unknown;
      try {
        lenient = JSON.parse(line.toString('utf8'));
      } catch {
        say(`skipped a non-JSON line from the server: ${printable(line)}`);
        return;
      }
      let answers: string | null = null;
      if (lenient && typeof lenient === 'object' && !Array.isArray(lenient)) {
        const id = (lenient as Record<string, unknown>).id;
        if (typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id))) answers = idKey(id);
      }
      if (lenient === null || typeof lenient !== 'object') {
        say(`skipped a non-JSON-RPC line from the server: ${printable(line)}`);
        return;
      }
      const out = refuseServer(e.code, line, answers);
      if (out) toClient(out);
      return;
    }
    if (Array.isArray(v)) {
      // A batch from the server is delivered once, as one array.
      const outs: JsonValue[] = [];
      let chain: Promise<void> | null = null;
      const take = (r: Out) => {
        if (r !== null) outs.push(r);
      };
      for (const el of v) {
        if (chain) chain = chain.then(() => Promise.resolve(handleServerMessage(el, line)).then(take));
        else {
          const r = handleServerMessage(el, line);
          if (r instanceof Promise) chain = r.then(take);
          else take(r);
        }
      }
      const flush = () => {
        if (outs.length) toClient(outs);
        maybeShutdown();
      };
      if (chain) return chain.then(flush);
      flush();
      return;
    }
    if (!isObject(v)) {
      say(`skipped a non-JSON-RPC line from the server: ${printable(line)}`);
      return;
    }
    const r = handleServerMessage(v, line);
    if (r instanceof Promise)
      return r.then((x) => {
        if (x !== null) toClient(x);
        maybeShutdown();
      });
    if (r !== null) toClient(r);
    maybeShutdown();
  }

  function handleServerMessage(v: JsonValue, line: Buffer): Out | Promise<Out> {
    if (!isObject(v)) return refuseServer('not_an_object', line, null);
    const exactKey = has(v, 'id') && validId(v.id) ? idKey(v.id!) : null;
    const answers = exactKey && !has(v, 'method') ? exactKey : null;
    const problem = envelopeProblem(v);
    if (problem) return refuseServer(problem.startsWith('member') ? 'other_spelling' : 'bad_jsonrpc', line, answers);
    if (has(v, 'method')) {
      if (typeof v.method !== 'string') return refuseServer('method_not_string', line, null);
      if (has(v, 'result') || has(v, 'error')) return refuseServer('request_and_response', line, null);
      if (has(v, 'id')) {
        // A server-to-client request (sampling, roots, elicitation): relayed; the answer goes back.
        if (exactKey === null) return refuseServer('bad_id', line, null);
        if (serverPending.size >= 10_000) serverPending.delete(serverPending.keys().next().value!);
        serverPending.set(exactKey, v.id!);
      }
      return v;
    }
    if (!has(v, 'id')) return refuseServer('response_without_id', line, null);
    if (has(v, 'result') === has(v, 'error')) return refuseServer('not_exactly_one_of_result_error', line, answers);
    if (has(v, 'error') && !isObject(v.error)) return refuseServer('bad_error', line, answers);
    if (exactKey === null) {
      say(`dropped a server response with id ${printable(stringifyAscii(v.id!))}`);
      return null;
    }
    const p = pending.get(exactKey);
    if (!p) {
      // Cancelled or timed out: the client was told already (or is to ignore it); say nothing.
      if (!retired.has(exactKey)) say(`dropped a server response to an unknown id: ${printable(line)}`);
      return null;
    }
    pending.delete(exactKey);
    if (o.observer) observe(p, v);
    if (p.method === 'tools/list' && has(v, 'result') && judge.hideDenied) return filterToolsList(v, p, line);
    return v;
  }

  function observe(p: Pending, v: JsonObject): void {
    const ob = o.observer!;
    if (p.method === 'tools/call' && p.name !== undefined) {
      const ok = has(v, 'result') && !(isObject(v.result) && v.result.isError === true);
      ob.onCall?.(p.name, p.args, ok);
    } else if (p.method === 'tools/list' && isObject(v.result) && Array.isArray(v.result.tools)) {
      ob.onToolsList?.(v.result.tools.flatMap((t) => (isObject(t) && typeof t.name === 'string' ? [t.name] : [])));
    } else if (p.method === 'initialize' && has(v, 'result')) ob.onInitialize?.(v.result!);
  }

  function filterToolsList(v: JsonObject, p: Pending, line: Buffer): Out | Promise<Out> {
    const res = v.result;
    const bad = (what: string): Out => {
      judge.event({ reason: 'protocol_server', rejected: 'server', code: what, line: line.toString('utf8') });
      return rpcError(p.id, -32603, `bad response from server: ${what}`);
    };
    if (!isObject(res)) return bad('tools_list_not_object');
    for (const k in res) if (otherSpellingOf(k, LIST_MEMBERS)) return bad('other_spelling');
    if (!Array.isArray(res.tools)) return bad('tools_not_array');
    const tools = res.tools;
    const keep: boolean[] = [];
    const names: string[] = [];
    const idx: number[] = [];
    tools.forEach((t, i) => {
      if (!isObject(t) || typeof t.name !== 'string' || Object.keys(t).some((k) => otherSpellingOf(k, NAME))) {
        keep[i] = false; // a tool entry we cannot name for sure is hidden
        return;
      }
      keep[i] = true;
      names.push(t.name);
      idx.push(i);
    });
    const apply = (hidden: boolean[]): Out => {
      hidden.forEach((h, k) => {
        if (h) keep[idx[k]!] = false;
      });
      res.tools = tools.filter((_, i) => keep[i]);
      return v;
    };
    const h = judge.hidden(names);
    if (h instanceof Promise) return h.then(apply, () => apply(names.map(() => true)));
    return apply(h);
  }

  // ---- lifecycle ----
  function maybeShutdownSoon(): void {
    queueMicrotask(maybeShutdown);
  }

  function maybeShutdown(): void {
    if (clientEnded && !shuttingDown && pending.size === 0 && clientSeq.idle) shutdown();
  }

  let termTimer: NodeJS.Timeout | null = null;
  let killTimer: NodeJS.Timeout | null = null;
  function shutdown(): void {
    if (shuttingDown) return;
    shuttingDown = true;
    // What is queued is written first; then the server sees EOF, as the stdio transport asks.
    flushServer();
    if (!sin.destroyed) sin.end();
    if (serverExited) return checkFinished();
    const stop = () => {
      termTimer = null;
      if (serverExited) return;
      if (o.graceMs > 0) say(`the server did not exit within ${o.graceMs} ms of its input closing; stopping it`);
      killServer('SIGTERM');
      killTimer = setTimeout(() => {
        if (!serverExited) {
          say('the server ignored SIGTERM; killing it');
          killServer('SIGKILL');
        }
      }, o.killAfterMs ?? 5000);
    };
    if (o.graceMs > 0) termTimer = setTimeout(stop, o.graceMs);
    else stop();
  }

  function checkFinished(): void {
    if (!serverExited || !serverOutEnded) return;
    if (shuttingDown) {
      failPending('server closed', 'server_closed');
      finish(signalCode ?? (failed ? 3 : 0));
      return;
    }
    // The server went away while the session was live.
    const hadPending = pending.size > 0;
    failPending('server closed', 'server_closed');
    if (clientSent > 0 || hadPending) {
      failed = true;
      failReason = 'the server exited while the client was still talking to it';
      finish(3);
    } else finish(signalCode ?? 0);
  }

  function finish(code: number): void {
    if (finished) return;
    finished = true;
    if (deadlineTimer) clearTimeout(deadlineTimer);
    if (stallTimer) clearTimeout(stallTimer);
    if (termTimer) clearTimeout(termTimer);
    if (killTimer) clearTimeout(killTimer);
    o.input.removeListener('data', onInput);
    o.input.pause();
    if (timeouts > 0)
      say(`server did not answer ${timeouts} request${timeouts === 1 ? '' : 's'} within ${timeoutMs} ms`);
    if (code === 3 && failReason) say(failReason);
    if (code === 3 || code === 2) killServer('SIGKILL');
    flushClient();
    judge.close?.();
    resolveDone(code);
  }

  child.on('exit', () => {
    serverExited = true;
    if (stallTimer) clearTimeout(stallTimer);
    // Give stdout a moment to deliver what the server wrote before it exited (a grandchild holding
    // the pipe open would otherwise keep us waiting for ever).
    setTimeout(() => {
      if (!serverOutEnded) {
        serverOutEnded = true;
        serverLines.end();
      }
      if (serverSeq.idle) checkFinished();
      else serverSeq.onIdle = checkFinished;
    }, 200).unref();
    if (serverOutEnded) {
      if (serverSeq.idle) checkFinished();
      else serverSeq.onIdle = checkFinished;
    }
  });
  sout.on('data', (c: Buffer) => serverLines.push(c));
  sout.on('end', () => {
    serverLines.end();
    serverOutEnded = true;
    if (serverExited) {
      if (serverSeq.idle) checkFinished();
      else serverSeq.onIdle = checkFinished;
    }
  });
  sout.on('error', () => undefined);

  const onInput = (c: Buffer) => clientLines.push(c);
  o.input.on('data', onInput);
  o.input.on('end', () => {
    clientLines.end();
    clientEnded = true;
    if (clientSeq.idle) maybeShutdown();
    else clientSeq.onIdle = maybeShutdown;
  });
  o.input.on('error', () => {
    clientEnded = true;
    maybeShutdown();
  });

  return {
    done,
    terminate(code: number) {
      if (finished || spawnFailed) return;
      if (signalCode !== null) {
        // A second signal does not wait.
        killServer('SIGKILL');
        finish(signalCode);
        return;
      }
      signalCode = code;
      clientEnded = true;
      o.input.removeListener('data', onInput);
      o.input.pause();
      if (shuttingDown) {
        // Already waiting out --grace: the signal ends the wait.
        if (termTimer) {
          clearTimeout(termTimer);
          termTimer = null;
        }
        killServer('SIGTERM');
        return;
      }
      shutdown();
    },
    interrupt() {
      if (finished) return;
      killServer('SIGKILL');
      signalCode = 0;
      shuttingDown = true;
      finish(0);
    },
  };
}
