/**
 * The web console (docs/console.md): Node's own http module (a handful of routes, no framework to
 * keep patched), on a unix socket and optionally one TCP address (loopback, or any with TLS).
 *   GET  /  /console.js /charts.js /console.css /favicon.svg   the page (no data in it; served without the token)
 *   GET  /api/subjects | /api/profiles       ./views.ts, read from disk per request
 *   GET  /api/approvals                      pending requests (the approvals socket's `list`)
 *   POST /api/approvals/ID  {"decision":…}   once | session | persist | deny
 *   GET  /api/decisions?uid&surface&action&reason&limit    the latest lines kept (./follow.ts)
 *   GET  /api/decisions/REF                  one line by its ref
 *   GET  /api/charts | /api/stats            per-surface/action buckets; the stream's counters
 *   GET  /api/events?uid&surface&action&reason             server-sent events (./hub.ts)
 * Every request passes ./access.ts first. No GET changes anything.
 */
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import { DECISIONS, type Decision } from '../../engine/approval.js';
import type { Config } from '../config/types.js';
import { isLeashError, LeashError } from '../../errors.js';
import { listenOn, parseListen } from '../../metrics/server.js';
import type { PeerIds } from '../approvals/peer.js';
import { peerFromAddon } from '../approvals/socket.js';
import { authorise, checkRequest, hostsFor, newToken, type AccessRules, type Refusal } from './access.js';
import type { ApprovalsPort } from './approvals.js';
import { followDecisions, REF, type FollowedLine, type Follower } from './follow.js';
import { createHub, matches, type Hub, type StreamFilter } from './hub.js';
import { CHARTS_JS } from './charts.js';
import { PAGE_JS } from './page.js';
import { PAGE_HTML } from './shell.js';
import { FAVICON_SVG, PAGE_CSS } from './style.js';
import { profilesView, subjectsView, type ViewContext } from './views.js';

export interface ConsoleOptions extends ViewContext {
  approvals: ApprovalsPort;
  /** The decision log file to follow (null: the sink is stdout; the decisions page says so). */
  decisionsPath: string | null;
  socket: string | null;
  listen: string | null;
  tls: { cert: string; key: string } | null;
  token?: string;
  isSubject: (uid: number) => boolean;
  operatorUid: () => number | null;
  peer?: (sock: net.Socket) => PeerIds | null;
  hub?: { highWater?: number; sampleMs?: number };
  follow?: { pollMs?: number };
  onError?: (e: Error) => void;
}

export interface ConsoleServer {
  readonly token: string;
  /** The URL a browser opens (the token in its fragment, never sent to the server), or null without a port. */
  readonly url: string | null;
  readonly socket: string | null;
  readonly port: number | null;
  readonly hub: Hub;
  readonly follower: Follower | null;
  close(): Promise<void>;
}

const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-store',
};

function send(res: http.ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(res.req.method === 'HEAD' ? '' : body);
}
const json = (res: http.ServerResponse, status: number, v: unknown) =>
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(v));
const refuse = (res: http.ServerResponse, r: Refusal | { status: number; code: string; message: string }) =>
  json(res, r.status, { ok: false, error: { code: r.code, message: r.message } });

/** The page's filters from a query string; a bad value is a 400, not a silent match-all. */
export function filterOf(q: URLSearchParams): StreamFilter | Refusal {
  const f: StreamFilter = {};
  const uid = q.get('uid');
  if (uid) {
    if (!/^\d{1,10}$/.test(uid)) return { status: 400, code: 'console_bad_request', message: 'uid must be a number' };
    f.uid = Number(uid);
  }
  for (const k of ['surface', 'action', 'reason'] as const) {
    const v = q.get(k);
    if (v) {
      // action may be a list (block,ask): the Decisions page opens on blocks and asks.
      const ok = k === 'action' ? /^[a-z_]{1,20}(,[a-z_]{1,20}){0,4}$/ : /^[a-z_]{1,40}$/;
      if (!ok.test(v)) return { status: 400, code: 'console_bad_request', message: `${k} is malformed` };
      f[k] = v;
    }
  }
  return f;
}

function readBody(req: http.IncomingMessage, max: number): Promise<string | null> {
  return new Promise((resolve) => {
    let size = 0;
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > max) {
        resolve(null);
        req.destroy();
      } else parts.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', () => resolve(null));
  });
}

const STATUS_OF: Record<string, number> = {
  approval_not_found: 404,
  approval_persist_failed: 409,
  approvals_refused: 403,
  approvals_unreachable: 503,
};

interface Ctx {
  o: ConsoleOptions;
  hub: Hub;
  follower: Follower | null;
}

async function decideRoute(c: Ctx, req: http.IncomingMessage, res: http.ServerResponse, id: string): Promise<void> {
  const body = await readBody(req, 16 * 1024);
  let decision: unknown;
  try {
    decision = body === null ? undefined : (JSON.parse(body) as { decision?: unknown }).decision;
  } catch {
    decision = undefined;
  }
  if (!DECISIONS.includes(decision as Decision))
    return refuse(res, {
      status: 400,
      code: 'console_bad_request',
      message: 'the body must be {"decision": "once" | "session" | "persist" | "deny"}',
    });
  try {
    const outcome = await c.o.approvals.decide(id, decision as Decision);
    json(res, 200, { ok: true, id, decision, outcome });
  } catch (e) {
    const code = isLeashError(e) ? e.code : 'internal';
    refuse(res, { status: STATUS_OF[code] ?? 500, code, message: (e as Error).message });
  }
}

function eventsRoute(c: Ctx, res: http.ServerResponse, q: URLSearchParams): void {
  const f = filterOf(q);
  if ('status' in f) return refuse(res, f);
  res.writeHead(200, {
    ...SECURITY_HEADERS,
    'content-type': 'text/event-stream; charset=utf-8',
    connection: 'keep-alive',
  });
  res.flushHeaders();
  c.hub.add(res, f);
}

async function apiRoute(c: Ctx, req: http.IncomingMessage, res: http.ServerResponse, url: URL): Promise<void> {
  const p = url.pathname;
  const post = req.method === 'POST';
  const m = /^\/api\/approvals\/([a-z2-7]{16})$/.exec(p);
  if (m) {
    if (!post) return refuse(res, { status: 405, code: 'console_method_refused', message: 'decide with POST' });
    return decideRoute(c, req, res, m[1]!);
  }
  if (post) return refuse(res, { status: 405, code: 'console_method_refused', message: `${p} is read with GET` });
  if (p === '/api/subjects') return json(res, 200, await subjectsView(c.o));
  if (p === '/api/profiles') return json(res, 200, profilesView(c.o));
  if (p === '/api/approvals') return json(res, 200, { requests: await c.o.approvals.list() });
  if (p === '/api/events') return eventsRoute(c, res, url.searchParams);
  if (p === '/api/stats')
    return json(res, 200, { stream: c.hub.stats(), clients: c.hub.clients(), follower: c.follower?.stats() ?? null });
  if (p === '/api/charts') return json(res, 200, { bucketMs: 10_000, buckets: c.follower?.buckets() ?? [] });
  if (p === '/api/decisions') {
    const f = filterOf(url.searchParams);
    if ('status' in f) return refuse(res, f);
    const limit = Math.min(1000, Math.max(1, Number(url.searchParams.get('limit')) || 200));
    const lines = c.follower?.recent(limit, (l: FollowedLine) => matches(f, l)) ?? [];
    return send(
      res,
      200,
      'application/json; charset=utf-8',
      `{"source":${JSON.stringify(c.o.decisionsPath)},"lines":[${lines.map((l) => l.text).join(',')}]}`,
    );
  }
  const r = /^\/api\/decisions\/([^/]+)$/.exec(p);
  if (r) {
    const hit = REF.test(r[1]!) ? await c.follower?.byRef(r[1]!) : null;
    if (!hit) return refuse(res, { status: 404, code: 'console_not_found', message: `no decision with ref ${r[1]}` });
    return send(res, 200, 'application/json; charset=utf-8', `{"line":${hit.text}}`);
  }
  refuse(res, { status: 404, code: 'console_not_found', message: `no such resource ${p}` });
}

function handler(c: Ctx, rules: AccessRules, onSocket: boolean): http.RequestListener {
  return (req, res) => {
    const bad = checkRequest(req, rules);
    if (bad) return refuse(res, bad);
    const url = new URL(req.url ?? '/', 'http://console');
    const p = url.pathname;
    if (!p.startsWith('/api/')) {
      if (req.method === 'POST')
        return refuse(res, { status: 405, code: 'console_method_refused', message: 'GET only' });
      if (p === '/' || p === '/index.html') return send(res, 200, 'text/html; charset=utf-8', PAGE_HTML);
      if (p === '/console.js') return send(res, 200, 'text/javascript; charset=utf-8', PAGE_JS);
      if (p === '/console.css') return send(res, 200, 'text/css; charset=utf-8', PAGE_CSS);
      if (p === '/charts.js') return send(res, 200, 'text/javascript; charset=utf-8', CHARTS_JS);
      if (p === '/favicon.svg' || p === '/favicon.ico') return send(res, 200, 'image/svg+xml', FAVICON_SVG);
      return refuse(res, { status: 404, code: 'console_not_found', message: `no such page ${p}` });
    }
    const who = authorise(req, { ...rules, hosts: null }, onSocket);
    if (!('ok' in who)) return refuse(res, who);
    apiRoute(c, req, res, url).catch((e: Error) => {
      c.o.onError?.(e);
      if (!res.headersSent) refuse(res, { status: 500, code: 'internal', message: e.message });
      else res.destroy();
    });
  };
}

/** While a browser has the live stream open, the console is subscribed to the approvals queue. */
function relayApprovals(c: Ctx): () => void {
  let unsubscribe: (() => void) | null = null;
  let want = false;
  let pending: Promise<void> | null = null;
  const sync = () => {
    if (pending) return;
    if (want && !unsubscribe)
      pending = c.o.approvals
        .subscribe(
          (ev) => c.hub.publishAlways('approval', JSON.stringify(ev)),
          () => {
            unsubscribe = null;
            c.hub.publishAlways('approvals-lost', '{}');
          },
        )
        .then(
          (u) => {
            unsubscribe = u;
            // The page says the approvals socket is back (after an approvals-lost, its header said otherwise).
            c.hub.publishAlways('approvals-ok', '{}');
          },
          (e: Error) => {
            c.hub.publishAlways('approvals-lost', JSON.stringify({ message: e.message }));
          },
        )
        .finally(() => {
          pending = null;
          if (!want && unsubscribe) sync();
        });
    else if (!want && unsubscribe) {
      unsubscribe();
      unsubscribe = null;
    }
  };
  c.hub.onCount((n) => {
    want = n > 0;
    sync();
  });
  const retry = setInterval(() => want && !unsubscribe && sync(), 2000);
  retry.unref();
  return () => {
    clearInterval(retry);
    want = false;
    unsubscribe?.();
  };
}

export async function startConsole(o: ConsoleOptions): Promise<ConsoleServer> {
  const token = o.token ?? newToken();
  const hub = createHub(o.hub);
  const follower =
    o.decisionsPath === null
      ? null
      : followDecisions({
          path: o.decisionsPath,
          ...(o.follow ?? {}),
          onLine: (l) => hub.publishDecision(l.text, l),
        });
  const c: Ctx = { o, hub, follower };
  const stopRelay = relayApprovals(c);
  const base = {
    token,
    isSubject: o.isSubject,
    operatorUid: o.operatorUid,
    peer: o.peer ?? peerFromAddon,
  };
  const servers: http.Server[] = [];
  let port: number | null = null;
  let url: string | null = null;
  const closeAll = async () => {
    stopRelay();
    hub.close();
    follower?.close();
    await Promise.all(
      servers.map(
        (s) =>
          new Promise<void>((r) => {
            s.close(() => r());
            s.closeAllConnections();
          }),
      ),
    );
    if (o.socket) fs.rmSync(o.socket, { force: true });
  };
  try {
    if (o.socket) {
      try {
        if (fs.lstatSync(o.socket).isSocket()) fs.unlinkSync(o.socket);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      }
      const srv = http.createServer(handler(c, { ...base, hosts: null, scheme: 'http' }, true));
      servers.push(srv);
      // Anyone may connect (as to the approvals socket): every request is judged by its peer or token.
      await listenOn(srv, o.socket);
      fs.chmodSync(o.socket, 0o666);
    }
    if (o.listen) {
      const { host, port: want } = parseListen(o.listen);
      const scheme = o.tls ? 'https' : 'http';
      // No Host is accepted until the port is known.
      const rules: AccessRules = { ...base, hosts: new Set(), scheme };
      const h = handler(c, rules, false);
      const srv = o.tls
        ? https.createServer({ cert: fs.readFileSync(o.tls.cert), key: fs.readFileSync(o.tls.key) }, h)
        : http.createServer(h);
      servers.push(srv);
      await listenOn(srv, { host, port: want });
      port = (srv.address() as net.AddressInfo).port;
      rules.hosts = hostsFor(host, port);
      const shown = host.includes(':') ? `[${host}]` : host;
      url = `${scheme}://${shown}:${port}/#token=${token}`;
    }
  } catch (e) {
    await closeAll();
    throw new LeashError('console_unavailable', `the console cannot serve: ${(e as Error).message}`);
  }
  return { token, url, socket: o.socket, port, hub, follower, close: closeAll };
}

/** The config's console settings as startConsole reads them. */
export function consoleSettings(c: Config): { socket: string; listen: string | null; tls: Config['console']['tls'] } {
  return { socket: c.console.socket, listen: c.console.listen, tls: c.console.tls };
}
