/**
 * The server → client relay: every server line is parsed strictly (or a plain response to a
 * pending request is checked natively and forwarded as it came), checked against the request it
 * answers, shown to the observer, and a tools/list result has the denied tools taken out.
 */
import {
  idKey,
  isObject,
  JsonError,
  parseStrict,
  stringifyAscii,
  type JsonObject,
  type JsonValue,
} from '../../formats/json.js';
import { otherSpellingOf } from '../judge/names.js';
import { plainResponseKey } from './scan.js';
import { CHUNK_LINES } from '../judge/native.js';
import { sha256 } from '../audit.js';
import { lineMayHoldSecret, redactResponse, REDACTED_METHODS } from '../judge/redact.js';
import { maybeShutdown, maybeShutdownSoon } from './lifecycle.js';
import { INTERNAL_ERROR, rpcError } from '../../formats/jsonrpc.js';
import { envelopeProblem, has, printable, validId } from './messages.js';
import { toClient } from './output.js';
import type { GateState, Out, Pending } from './gate.js';

const LIST_MEMBERS = ['tools', 'nextCursor'];
const NAME = ['name'];

export function serverLineTooLong(g: GateState): void {
  g.judge.event({ reason: 'protocol_server', rejected: 'server', code: 'line_too_long' });
  g.say('dropped an over-long line from the server');
}

function refuseServer(g: GateState, what: string, line: Buffer, answers: string | null): Out {
  g.judge.event({ reason: 'protocol_server', rejected: 'server', code: what, line: line.toString('utf8') });
  const p = answers ? g.pending.get(answers) : undefined;
  if (answers && p) {
    g.pending.delete(answers);
    maybeShutdownSoon(g);
    return rpcError(p.id, INTERNAL_ERROR, `bad response from server: ${what}`);
  }
  g.say(`dropped a message from the server (${what}): ${printable(line)}`);
  return null;
}

export function handleServerLine(g: GateState, line: Buffer): void | Promise<void> {
  if (line.length === 0) return;
  const scanner = g.scanner;
  // The common case: a canonical response to a pending request whose result the gate neither
  // filters nor observes is checked natively and forwarded as it came, without building it.
  if (scanner !== null && !g.observer && scanner.scan(line)) {
    const key = plainResponseKey(line, scanner.facts);
    const p = key === null ? undefined : g.pending.get(key);
    if (p && forwardsAsIs(g, p, line)) {
      g.pending.delete(key!);
      toClient(g, null, line);
      maybeShutdown(g);
      return;
    }
  }
  let v: JsonValue;
  try {
    v = parseStrict(line);
  } catch (e) {
    if (!(e instanceof JsonError)) throw e;
    return refuseUnparsed(g, e, line);
  }
  if (Array.isArray(v)) return serverBatch(g, v, line);
  if (!isObject(v)) {
    g.say(`skipped a non-JSON-RPC line from the server: ${printable(line)}`);
    return;
  }
  const r = handleServerMessage(g, v, line);
  if (r instanceof Promise)
    return r.then((x) => {
      if (x !== null) toClient(g, x);
      maybeShutdown(g);
    });
  if (r !== null) toClient(g, r);
  maybeShutdown(g);
}

/**
 * Whether a plain answer to `p` goes to the client as it came: its result is neither filtered, observed, audited,
 * read for the server's directories nor (when it may hold a secret: `line` holds a literal, or `mayHold` says so)
 * redacted.
 */
function forwardsAsIs(g: GateState, p: Pending, line: Buffer | null, mayHold = false): boolean {
  return (
    !(p.method === 'tools/list' && (g.judge.hideDenied || g.judge.listed !== undefined)) &&
    p.method !== 'initialize' &&
    p.audit === undefined &&
    p.filter === undefined &&
    p.dirsEpoch === undefined &&
    !(g.judge.redactOutput && REDACTED_METHODS.has(p.method) && (line === null ? mayHold : lineMayHoldSecret(line)))
  );
}

/**
 * A chunk from the server. The plain answers in it (read in one native call per run of them, scan.ts AnswerReader)
 * to pending requests that forwardsAsIs are sent on as they came, each run in one piece: what handleServerLine does
 * with each, without two calls into the addon per line. A run ends at any other line: that line goes to the line
 * reader, and the next run starts after it while no line waits. A line carried over from the last chunk is finished
 * first.
 */
export function serverChunk(g: GateState, c: Buffer): void {
  const ar = g.answers;
  if (ar === null) return g.serverLines.push(c);
  c = g.serverLines.finishLine(c);
  const out = ar.out;
  let at = 0;
  while (at < c.length && g.serverSeq.idle) {
    const n = ar.read(c, at);
    let k = 0;
    for (; k < n; k++) {
      const key = `n${out[3 * k + 1]!}`;
      const p = g.pending.get(key);
      if (p === undefined || !forwardsAsIs(g, p, null, out[3 * k + 2] !== 0)) break;
      g.pending.delete(key);
    }
    if (k > 0) {
      const end = out[3 * (k - 1)]!;
      toClient(g, null, c.subarray(at, end - 1));
      at = end;
      maybeShutdown(g);
    }
    if (k === CHUNK_LINES) continue;
    // Not one (or the chunk's last, partial line): read as any line.
    at = g.serverLines.pushOne(c, at);
  }
  if (at < c.length) g.serverLines.push(c.subarray(at));
}

/** A line the strict parser refused. */
function refuseUnparsed(g: GateState, e: JsonError, line: Buffer): void {
  // Not JSON at all is a banner (console.log on stdout): skipped, never charged to a request.
  // JSON that a lenient reader accepts but we refuse fails the request it claims to answer.
  let lenient: unknown;
  try {
    lenient = JSON.parse(line.toString('utf8'));
  } catch {
    g.say(`skipped a non-JSON line from the server: ${printable(line)}`);
    return;
  }
  let answers: string | null = null;
  if (lenient && typeof lenient === 'object' && !Array.isArray(lenient)) {
    const id = (lenient as Record<string, unknown>).id;
    if (typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id))) answers = idKey(id);
  }
  if (lenient === null || typeof lenient !== 'object') {
    g.say(`skipped a non-JSON-RPC line from the server: ${printable(line)}`);
    return;
  }
  const out = refuseServer(g, e.code, line, answers);
  if (out) toClient(g, out);
}

/** A batch from the server is delivered once, as one array. */
function serverBatch(g: GateState, v: JsonValue[], line: Buffer): void | Promise<void> {
  const outs: JsonValue[] = [];
  let chain: Promise<void> | null = null;
  const take = (r: Out) => {
    if (r !== null) outs.push(r);
  };
  for (const el of v) {
    if (chain) chain = chain.then(() => Promise.resolve(handleServerMessage(g, el, line)).then(take));
    else {
      const r = handleServerMessage(g, el, line);
      if (r instanceof Promise) chain = r.then(take);
      else take(r);
    }
  }
  const flush = () => {
    if (outs.length) toClient(g, outs);
    maybeShutdown(g);
  };
  if (chain) return chain.then(flush);
  flush();
}

function handleServerMessage(g: GateState, v: JsonValue, line: Buffer): Out | Promise<Out> {
  if (!isObject(v)) return refuseServer(g, 'not_an_object', line, null);
  const exactKey = has(v, 'id') && validId(v.id) ? idKey(v.id!) : null;
  const answers = exactKey && !has(v, 'method') ? exactKey : null;
  const problem = envelopeProblem(v);
  if (problem) return refuseServer(g, problem.startsWith('member') ? 'other_spelling' : 'bad_jsonrpc', line, answers);
  if (has(v, 'method')) {
    if (typeof v.method !== 'string') return refuseServer(g, 'method_not_string', line, null);
    if (has(v, 'result') || has(v, 'error')) return refuseServer(g, 'request_and_response', line, null);
    if (has(v, 'id')) {
      // A server-to-client request (sampling, roots, elicitation): relayed; the answer goes back.
      if (exactKey === null) return refuseServer(g, 'bad_id', line, null);
      if (g.serverPending.size >= 10_000) {
        const old = g.serverPending.keys().next().value!;
        g.serverPending.delete(old);
        g.rootsAsked.delete(old);
      }
      g.serverPending.set(exactKey, v.id!);
      if (v.method === 'roots/list') g.rootsAsked.add(exactKey);
    }
    return v;
  }
  if (!has(v, 'id')) return refuseServer(g, 'response_without_id', line, null);
  if (has(v, 'result') === has(v, 'error')) return refuseServer(g, 'not_exactly_one_of_result_error', line, answers);
  if (has(v, 'error') && !isObject(v.error)) return refuseServer(g, 'bad_error', line, answers);
  if (exactKey === null) {
    g.say(`dropped a server response with id ${printable(stringifyAscii(v.id!))}`);
    return null;
  }
  const p = g.pending.get(exactKey);
  if (!p) {
    // Cancelled or timed out: the client was told already (or is to ignore it); say nothing.
    if (!g.retired.has(exactKey)) g.say(`dropped a server response to an unknown id: ${printable(line)}`);
    return null;
  }
  g.pending.delete(exactKey);
  if (g.observer) observe(g, p, v);
  if (p.method === 'initialize' && isObject(v.result) && isObject(v.result.serverInfo)) {
    const si = v.result.serverInfo;
    if (typeof si.name === 'string') g.judge.serverInfo?.(si.name, typeof si.version === 'string' ? si.version : null);
    for (const w of g.judge.warnings?.() ?? []) g.say(`warning: ${w}`);
  }
  if (p.dirsEpoch !== undefined) modelDirs(g, v, p.dirsEpoch);
  if (p.filter !== undefined && has(v, 'result')) {
    const f = p.filter(v.result!);
    // The service's judge asks it about the entries: the answer waits (a failure takes every entry out).
    if (f instanceof Promise)
      return f.then(
        () => afterFilter(g, v, p, line),
        () => {
          v.result = { content: [], isError: true };
          return afterFilter(g, v, p, line);
        },
      );
  }
  return afterFilter(g, v, p, line);
}

/** A response once its listing is filtered: redacted, audited, and a tools/list page read. */
function afterFilter(g: GateState, v: JsonObject, p: Pending, line: Buffer): Out | Promise<Out> {
  const redacted = g.judge.redactOutput === true && REDACTED_METHODS.has(p.method) && redactResponse(v);
  if (p.audit !== undefined) {
    const res = has(v, 'result') ? v.result! : v.error!;
    g.judge.answered?.(p.audit, {
      outcome: has(v, 'error') ? 'error' : isObject(res) && res.isError === true ? 'tool_error' : 'ok',
      sha256: sha256(stringifyAscii(res)),
      redacted,
    });
  }
  if (p.method === 'tools/list' && g.judge.listed && isObject(v.result) && Array.isArray(v.result.tools))
    g.judge.listed(schemaHashes(v.result.tools));
  if (p.method === 'tools/list' && has(v, 'result') && g.judge.hideDenied) return filterToolsList(g, v, p, line);
  return v;
}

/** A list_allowed_directories answer: the server's own word on where its relative paths land. */
function modelDirs(g: GateState, v: JsonObject, epoch: number): void {
  const r = v.result;
  if (!isObject(r) || r.isError === true || !Array.isArray(r.content)) return;
  const first = r.content[0];
  if (isObject(first) && typeof first.text === 'string') g.model.serverDirs(first.text, epoch);
}

/**
 * Each named tool of a tools/list page and the SHA-256 of its definition as the server sent it (the
 * gate's canonical form): what a session approval of that tool is bound to.
 */
function schemaHashes(tools: JsonValue[]): [string, string][] {
  return tools.flatMap((t): [string, string][] =>
    isObject(t) && typeof t.name === 'string' ? [[t.name, sha256(stringifyAscii(t))]] : [],
  );
}

function observe(g: GateState, p: Pending, v: JsonObject): void {
  const ob = g.observer!;
  if (p.method === 'tools/call' && p.name !== undefined) {
    const ok = has(v, 'result') && !(isObject(v.result) && v.result.isError === true);
    ob.onCall?.(p.name, p.args, ok);
  } else if (p.method === 'tools/list' && isObject(v.result) && Array.isArray(v.result.tools)) {
    ob.onToolsList?.(v.result.tools.flatMap((t) => (isObject(t) && typeof t.name === 'string' ? [t.name] : [])));
  } else if (p.method === 'initialize' && has(v, 'result')) ob.onInitialize?.(v.result!);
}

/** Takes the tools the judge hides out of a tools/list result (an entry it cannot name is hidden). */
function filterToolsList(g: GateState, v: JsonObject, p: Pending, line: Buffer): Out | Promise<Out> {
  const res = v.result;
  const bad = (what: string): Out => {
    g.judge.event({ reason: 'protocol_server', rejected: 'server', code: what, line: line.toString('utf8') });
    return rpcError(p.id, INTERNAL_ERROR, `bad response from server: ${what}`);
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
  const h = g.judge.hidden(names);
  if (h instanceof Promise) return h.then(apply, () => apply(names.map(() => true)));
  return apply(h);
}
