/**
 * The tools socket: `leash mcp` without --policy asks the running service, which identifies the
 * caller by SO_PEERCRED (never by anything the caller says) and judges against that subject's
 * resolved tools policy, writing the decision log under that UID.
 *
 * Wire: newline-delimited JSON both ways, requests carry `seq`, answers echo it.
 *   {op:"hello"}                              → {seq, ok:true, uid, hide_denied, redact_output}
 *   {op:"judge", method, params?, notification, server?, model?} → {seq, judgment}   (server: serverInfo.name;
 *                                               model: the gate's ServerModel snapshot, where relative paths land)
 *   {op:"hidden", names:[...]}                → {seq, hidden:[bool...]}
 *   {op:"event", event:{...}}                 (no answer: logged)
 *   a judge answered {judgment:{action:"ask", method, reason, rule, hold:N}}: the call is held for a
 *   human (./hold.ts); later, once, {hold:N, judgment:{...}} (allow, or deny with the approval's reason)
 *   {op:"cancel", hold:N}                     (no answer: the gate gave the held call up)
 *   {op:"readable", paths:[...]}              → {seq, allowed:[bool...]}   (a listing's entries, judged as reads)
 *   {op:"tools", tools:[[name, sha256]...]}   (no answer: a tools/list page's schema hashes)
 *   {op:"commands_policy"}                    → {seq, ok:true, uid, policy:{fail_mode, commands}}
 *                                               | {seq, ok:false, error:"no_policy"}   (leash terminal)
 * The service parses the gate's lines with the same strict reader the gate uses on MCP traffic.
 */
import net from 'node:net';
import path from 'node:path';
import { createValidatedWalker } from '../judge/operations/paths.js';
import { ServerModel, type ModelSnapshot } from '../judge/operations/model.js';
import { filterListingAsync, type ListingKind } from '../judge/operations/listing.js';
import { nativeCommon } from '../../native.js';
import type { DecisionWriter } from '../../log/decisions.js';
import { logEvent, logJudgment, type GateEvent, type GateJudge, type GateJudgment } from '../judge/judge.js';
import {
  fromPlain,
  isObject,
  parseStrict,
  stringifyAscii,
  toPlain,
  type JsonObject,
  type JsonValue,
} from '../../formats/json.js';
import { LineReader } from '../../formats/lines.js';
import { listenJsonLines } from '../../formats/line-server.js';
import { deniedByName, judgeRequest } from '../judge/decide.js';
import { readAllowed } from '../judge/operations/rules.js';
import { type CompiledGatePolicy } from '../judge/compile.js';
import type { Asker } from '../../engine/approval.js';
import { ToolHolds } from './hold.js';
import { DEFAULT_TOOLS_SOCKET } from '../../paths.js';

/** Where the service listens by default. */
export { DEFAULT_TOOLS_SOCKET };

/** A line on the socket longer than this ends the connection (the gate's own line limit). */
const MAX_SOCKET_LINE = 64 * 1024 * 1024;

export interface ToolsSocketServerOptions {
  /** The subject's compiled gate policy, or null (no policy: every policed call is denied). */
  policyForUid(uid: number): CompiledGatePolicy | null;
  log: DecisionWriter;
  /** Socket path (default /run/leash/tools.sock). Its directory must exist. */
  path?: string;
  /** Secret masking for logged arguments (the engine's maskSecrets). */
  mask?: (s: string) => string;
  /** Each judge request's time from its line to the answer, in seconds: the metrics. */
  onJudge?: (seconds: number) => void;
  /** The caller's UID from a connected socket (default: SO_PEERCRED through the addon). */
  peerUid?: (sock: net.Socket) => number;
  /** Mode of the socket file: every account may connect; the UID is what identifies it. */
  mode?: number;
  /**
   * The subject's resolved commands policy for `leash terminal` (`{fail_mode, commands: {mode,
   * allow, deny, args?}}`), or null when it has none. Absent: the op is refused like any unknown op.
   */
  commandsPolicyForUid?(uid: number): unknown;
  /** The approvals queue: asked calls are held for it. Absent: refused at once (approval_unavailable). */
  ask?: Asker;
  /** A session approval was dropped: the server changed the tool's definition (the service logs it). */
  onSessionDropped?: (e: { uid: number; tool: string; request: string | null }) => void;
}

/** The gate's model as its judge request carries it, or null when it is not one (relative paths are then unknown). */
function modelFrom(v: JsonValue | undefined): ServerModel | null {
  if (v === undefined || !isObject(v)) return null;
  const s = toPlain(v) as Partial<ModelSnapshot>;
  const strs = (a: unknown): a is string[] => Array.isArray(a) && a.every((x) => typeof x === 'string');
  if (!Array.isArray(s.lists) || !s.lists.every((l) => l === null || strs(l))) return null;
  if (!(s.cwd === null || typeof s.cwd === 'string') || !strs(s.argv)) return null;
  return ServerModel.fromSnapshot(s as ModelSnapshot);
}

/** A listing as the service's judgment names it, or null. */
function listingFrom(v: unknown): { listing: ListingKind; paths: string[] } | null {
  if (v === null || typeof v !== 'object') return null;
  const { kind, paths } = v as { kind?: unknown; paths?: unknown };
  if (kind !== 'lines' && kind !== 'tree' && kind !== 'paths') return null;
  if (!Array.isArray(paths) || !paths.every((p) => typeof p === 'string')) return null;
  return { listing: kind, paths };
}

/** A judgment as it goes on the wire to the gate. */
function wireJudgment(j: GateJudgment): JsonObject {
  const out: JsonObject = { action: j.action, method: j.method };
  if (j.action === 'allow') out.policed = j.policed;
  else if (j.action === 'deny') {
    out.code = j.code;
    out.message = j.message;
    out.reason = j.reason;
    out.rule = j.rule;
  }
  if (j.ref !== undefined) out.ref = j.ref;
  // A listing call: the gate asks about its entries (op readable) and takes out what is protected.
  const a = j.action === 'allow' ? j.op?.action : undefined;
  if (a?.listing !== undefined) out.listing = { kind: a.listing, paths: [...a.paths] };
  return out;
}

export interface ToolsSocketServer {
  readonly path: string;
  close(): Promise<void>;
}

function peerUidFromAddon(sock: net.Socket): number {
  const fd = (sock as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new Error('no descriptor for the peer socket');
  return nativeCommon().peerCred(fd).uid;
}

const noPolicyJudgment = (method: string): GateJudgment => ({
  action: 'deny',
  code: -32001,
  message: 'denied by leash: no_policy',
  reason: 'no_policy',
  rule: null,
  method,
});

/** Starts the service side of the tools socket. */
export async function createToolsSocketServer(o: ToolsSocketServerOptions): Promise<ToolsSocketServer> {
  const mask = o.mask ?? ((s: string) => s);
  const peerUid = o.peerUid ?? peerUidFromAddon;
  // One remembering walk for every gate: what a path resolves to is the filesystem's answer, the same
  // whoever asks (operations/paths.ts createValidatedWalker).
  const walker = createValidatedWalker();
  const server = await listenJsonLines({
    path: o.path ?? DEFAULT_TOOLS_SOCKET,
    maxLineBytes: MAX_SOCKET_LINE,
    mode: o.mode ?? 0o666,
    accept: ({ sock, send }) => {
      let uid: number;
      try {
        uid = peerUid(sock);
      } catch {
        return null;
      }
      // The gate's life is this connection: its held calls and session approvals end with it.
      const holds = new ToolHolds({
        ...(o.ask ? { ask: o.ask } : {}),
        log: o.log,
        uid,
        mask,
        ...(o.onSessionDropped ? { onSessionDropped: o.onSessionDropped } : {}),
      });
      sock.on('close', () => holds.close());
      return (msg: JsonObject) => {
        const seq = msg.seq ?? null;
        // The policy is looked up per message, so a reload reaches open sessions.
        const policy = o.policyForUid(uid);
        const ctx = { log: o.log, uid, logArgs: policy?.logArgs ?? 'denied', mask };
        switch (msg.op) {
          case 'hello':
            send({
              seq,
              ok: true,
              uid,
              hide_denied: policy ? policy.hideDenied : true,
              no_policy: policy === null,
              redact_output: policy ? policy.redactOutput : true,
            });
            return;
          case 'judge': {
            const t0 = o.onJudge ? performance.now() : 0;
            const method = typeof msg.method === 'string' ? msg.method : '';
            const params = msg.params;
            let j: GateJudgment;
            if (policy === null) j = noPolicyJudgment(method);
            else
              j = judgeRequest(method, params, policy, {
                serverName: typeof msg.server === 'string' ? msg.server : null,
                walker,
                model: modelFrom(msg.model),
              }) as GateJudgment;
            if (policy === null) {
              j.ref = o.log.write({
                uid,
                surface: 'tools',
                action: 'block',
                reason: 'no_policy',
                subject: { method },
                rule: null,
              });
            } else {
              const ref = logJudgment(j, params, ctx);
              if (ref !== undefined) j.ref = ref;
            }
            let out: JsonObject;
            if (j.action === 'ask') {
              const h = holds.start(j, params, (hold, final) => send({ hold, judgment: wireJudgment(final) }));
              out =
                'now' in h
                  ? wireJudgment(h.now)
                  : { action: 'ask', method: j.method, reason: j.reason, rule: j.rule, hold: h.hold };
            } else out = wireJudgment(j);
            send({ seq, judgment: out });
            o.onJudge?.((performance.now() - t0) / 1000);
            return;
          }
          case 'hidden': {
            const names = Array.isArray(msg.names) ? msg.names.filter((n): n is string => typeof n === 'string') : [];
            send({ seq, hidden: names.map((n) => (policy ? deniedByName(n, policy) : true)) });
            return;
          }
          case 'event': {
            const ev = isObject(msg.event) ? (toPlain(msg.event) as GateEvent) : null;
            const reasons = ['protocol_client', 'protocol_server', 'server_timeout', 'server_closed', 'server_stalled'];
            if (ev && reasons.includes(ev.reason)) logEvent(ev, ctx);
            return;
          }
          case 'cancel':
            if (typeof msg.hold === 'number') holds.cancel(msg.hold);
            return;
          case 'readable': {
            const paths = Array.isArray(msg.paths) ? msg.paths : [];
            const ok = policy?.ops ? readAllowed(policy.ops) : null;
            send({
              seq,
              allowed: paths.map((p) => ok !== null && typeof p === 'string' && p.startsWith('/') && ok(p)),
            });
            return;
          }
          case 'tools': {
            const list = Array.isArray(msg.tools) ? msg.tools : [];
            holds.listed(
              list.flatMap((t) =>
                Array.isArray(t) && typeof t[0] === 'string' && typeof t[1] === 'string'
                  ? [[t[0], t[1]] as [string, string]]
                  : [],
              ),
            );
            return;
          }
          case 'commands_policy': {
            if (!o.commandsPolicyForUid) return sock.destroy();
            const p = o.commandsPolicyForUid(uid);
            if (p === null || p === undefined) send({ seq, ok: false, error: 'no_policy' });
            else send({ seq, ok: true, uid, policy: fromPlain(p) });
            return;
          }
          default:
            sock.destroy();
        }
      };
    },
  });
  return {
    path: server.path,
    async close() {
      await server.close();
      walker?.close();
    },
  };
}

/**
 * The gate's side: connects, says hello, and returns a judge whose answers come from the service.
 * Rejects when the service cannot be reached (the gate then exits 2: nothing is enforced).
 */
export async function connectToolsJudge(sockPath = DEFAULT_TOOLS_SOCKET): Promise<GateJudge & { uid: number }> {
  const sock = net.createConnection(path.resolve(sockPath));
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', resolve);
    sock.once('error', reject);
  });
  let seq = 0;
  const waiting = new Map<number, { resolve: (v: JsonObject) => void; reject: (e: Error) => void }>();
  // Held calls by the service's hold number: each resolves once with its final judgment.
  const holds = new Map<number, (j: GateJudgment) => void>();
  const outcomes = new Map<number, Promise<GateJudgment>>();
  let dead: Error | null = null;
  const lines = new LineReader(
    (line) => {
      let v: JsonValue;
      try {
        v = parseStrict(line);
      } catch {
        return;
      }
      if (!isObject(v)) return;
      if (typeof v.hold === 'number' && isObject(v.judgment)) {
        const h = holds.get(v.hold);
        holds.delete(v.hold);
        h?.(toPlain(v.judgment) as GateJudgment);
        return;
      }
      if (typeof v.seq !== 'number') return;
      // A hold is registered as its judge answer is read, so an outcome right behind it finds it.
      const held = isObject(v.judgment) && v.judgment.action === 'ask' ? v.judgment.hold : undefined;
      if (typeof held === 'number' && !holds.has(held))
        outcomes.set(held, new Promise<GateJudgment>((r) => holds.set(held, r)));
      const w = waiting.get(v.seq);
      if (w) {
        waiting.delete(v.seq);
        w.resolve(v);
      }
    },
    () => undefined,
    { maxBytes: MAX_SOCKET_LINE },
  );
  sock.on('data', (chunk: Buffer) => lines.push(chunk));
  const die = (e: Error) => {
    dead = e;
    for (const w of waiting.values()) w.reject(e);
    waiting.clear();
    // The service went away with calls held: refused, never relayed.
    for (const r of holds.values())
      r({
        action: 'deny',
        code: -32001,
        message: 'denied by leash: approval_cancelled',
        reason: 'approval_cancelled',
        rule: null,
        method: 'tools/call',
      });
    holds.clear();
  };
  sock.on('error', die);
  sock.on('close', () => die(new Error('the leash service closed the tools socket')));
  const ask = (msg: JsonObject): Promise<JsonObject> => {
    if (dead) return Promise.reject(dead);
    const n = ++seq;
    msg.seq = n;
    sock.write(stringifyAscii(msg) + '\n');
    return new Promise((resolve, reject) => waiting.set(n, { resolve, reject }));
  };
  const hello = await ask({ op: 'hello' });
  if (hello.ok !== true || typeof hello.uid !== 'number') throw new Error('the leash service refused the hello');
  let serverName: string | null = null;
  let model: ServerModel | null = null;
  return {
    uid: hello.uid,
    hideDenied: hello.hide_denied === true,
    // Secrets are masked unless the subject's policy switched it off.
    redactOutput: hello.redact_output !== false,
    serverInfo(name) {
      serverName = name;
    },
    attachModel(m) {
      model = m;
    },
    async judge(method, params, notification) {
      const msg: JsonObject = { op: 'judge', method, notification };
      if (serverName !== null) msg.server = serverName;
      if (model !== null && method === 'tools/call') msg.model = fromPlain(model.snapshot()) as JsonObject;
      if (params !== undefined) msg.params = params;
      const r = await ask(msg);
      const j = r.judgment;
      if (!isObject(j)) throw new Error('bad judgment from the service');
      const out = toPlain(j) as GateJudgment & { hold?: number; listing?: unknown };
      const listing = listingFrom(out.listing);
      delete out.listing;
      if (listing !== null && out.action === 'allow')
        out.filter = (result) =>
          filterListingAsync(result, listing, async (paths) => {
            const r = await ask({ op: 'readable', paths });
            if (!Array.isArray(r.allowed) || r.allowed.length !== paths.length)
              throw new Error('bad readable answer from the service');
            return r.allowed.map((x) => x === true);
          });
      if (out.action === 'ask') {
        const hold = out.hold;
        const outcome = typeof hold === 'number' ? outcomes.get(hold) : undefined;
        if (typeof hold !== 'number' || outcome === undefined) throw new Error('bad hold from the service');
        outcomes.delete(hold);
        delete out.hold;
        out.held = {
          outcome,
          cancel() {
            if (!dead && holds.has(hold)) sock.write(stringifyAscii({ op: 'cancel', hold }) + '\n');
          },
        };
      }
      return out;
    },
    listed(tools) {
      if (dead) return;
      sock.write(stringifyAscii({ op: 'tools', tools }) + '\n');
    },
    async hidden(names) {
      const r = await ask({ op: 'hidden', names });
      if (!Array.isArray(r.hidden) || r.hidden.length !== names.length)
        throw new Error('bad hidden list from the service');
      return r.hidden.map((h) => h === true);
    },
    event(ev) {
      if (dead) return;
      sock.write(stringifyAscii({ op: 'event', event: fromPlain(ev) }) + '\n');
    },
    close() {
      sock.end();
    },
  };
}
