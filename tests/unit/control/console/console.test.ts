/**
 * The console's parts without a service: the stream's bound (a slow client is sampled, counted, and its buffer
 * stays bounded), the follower (appends, rotation, truncation, refs), and the HTTP server's refusals (no token,
 * foreign Origin, foreign Host, GET on the decide route, a bad decision) with a fake approvals queue.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../../src/control/config/load.js';
import { createHub, matches, type StreamSink } from '../../../../src/control/console/hub.js';
import { followDecisions } from '../../../../src/control/console/follow.js';
import { startConsole, type ConsoleServer } from '../../../../src/control/console/server.js';
import type { ApprovalsPort } from '../../../../src/control/console/approvals.js';
import type { PendingView } from '../../../../src/control/approvals/queue.js';
import { LeashError } from '../../../../src/errors.js';

/** A sink whose reader takes nothing until told: writableLength grows as a stuck browser's socket would. */
function stuckSink() {
  let buffered = 0;
  const on: Record<string, (() => void)[]> = {};
  const sink: StreamSink & { take(): void; text: string[] } = {
    text: [],
    write(c) {
      buffered += Buffer.byteLength(c);
      sink.text.push(c);
      return buffered < 16384;
    },
    get writableLength() {
      return buffered;
    },
    on(ev, fn) {
      (on[ev] ??= []).push(fn);
      return sink;
    },
    end() {},
    take() {
      buffered = 0;
      for (const f of on.drain ?? []) f();
    },
  };
  return sink;
}

const line = (i: number) =>
  JSON.stringify({
    ts: new Date(1_700_000_000_000 + i).toISOString(),
    ref: `aaaa${String(i % 10000).padStart(4, '0')}`.replace(/[0189]/g, 'a'),
    uid: 2001,
    surface: 'network',
    action: i % 2 ? 'block' : 'allow',
    reason: 'x',
    subject: { domain: 'pad'.repeat(40) },
  });

describe('console stream (hub)', () => {
  it('a slow client is sampled with a counter and its buffer stays bounded; a fast one gets every line', () => {
    let t = 0;
    const hub = createHub({ highWater: 64 * 1024, sampleMs: 250, now: () => t });
    const slow = stuckSink();
    const fast = stuckSink();
    hub.add(slow, {});
    hub.add(fast, {});
    let max = 0;
    for (let i = 0; i < 10_000; i++) {
      t = i; // 1,000 lines per second
      hub.publishDecision(line(i), { uid: 2001, surface: 'network', action: 'allow', reason: 'x' });
      fast.take();
      max = Math.max(max, slow.writableLength);
    }
    const [s, f] = hub.clients();
    expect(f!.delivered).toBe(10_000);
    expect(f!.dropped).toBe(0);
    expect(s!.mode).toBe('sampled');
    expect(s!.dropped).toBeGreaterThan(9000);
    expect(s!.delivered + s!.dropped).toBe(10_000);
    expect(max).toBeLessThanOrEqual(2 * 64 * 1024 + 2048);
    // The page is told: status events carry the mode and the count.
    expect(slow.text.some((x) => x.includes('"mode":"sampled"'))).toBe(true);
    // Drained: back to the full stream, said once.
    slow.take();
    expect(hub.clients()[0]!.mode).toBe('full');
    expect(slow.text.at(-1)).toContain('"mode":"full"');
    hub.close();
  });

  it('filters: a client gets only what it asked for; approvals go to every client unsampled', () => {
    const hub = createHub({ highWater: 1 });
    const a = stuckSink();
    hub.add(a, { action: 'block', uid: 7 });
    hub.publishDecision('{"a":1}', { uid: 7, surface: 'network', action: 'allow', reason: 'x' });
    hub.publishDecision('{"a":2}', { uid: 8, surface: 'network', action: 'block', reason: 'x' });
    expect(a.text.filter((x) => x.startsWith('event: decision'))).toHaveLength(0);
    hub.publishAlways('approval', '{"event":"request"}');
    hub.publishAlways('approval', '{"event":"decided"}');
    expect(a.text.filter((x) => x.startsWith('event: approval'))).toHaveLength(2);
    hub.close();
  });
});

describe('console follower', () => {
  let dir = '';
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-console-'));
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('reads appends, a rename-style rotation and a truncation, keeps a bounded ring and finds refs', async () => {
    const p = path.join(dir, 'd.jsonl');
    const l = (ref: string, action = 'block') =>
      JSON.stringify({ ts: new Date().toISOString(), ref, uid: 1, surface: 'network', action, reason: 'r' }) + '\n';
    fs.writeFileSync(p, l('aaaaaaaa') + l('aaaaaaab'));
    const got: string[] = [];
    const f = followDecisions({ path: p, onLine: (x) => got.push(x.ref), pollMs: 1_000_000, ringSize: 3 });
    expect(f.recent(10).map((x) => x.ref)).toEqual(['aaaaaaaa', 'aaaaaaab']); // preloaded, not streamed
    fs.appendFileSync(p, l('aaaaaaac') + 'not json\n' + l('aaaaaaad').slice(0, 20));
    f.poll();
    expect(got).toEqual(['aaaaaaac']);
    fs.appendFileSync(p, l('aaaaaaad').slice(20));
    f.poll();
    expect(got).toEqual(['aaaaaaac', 'aaaaaaad']);
    expect(f.stats().skipped).toBe(1);
    fs.renameSync(p, p + '.1');
    fs.appendFileSync(p + '.1', l('aaaaaaae'));
    fs.writeFileSync(p, l('aaaaaaaf'));
    f.poll();
    expect(got).toEqual(['aaaaaaac', 'aaaaaaad', 'aaaaaaae', 'aaaaaaaf']);
    expect(f.stats().rotations).toBe(1);
    expect(f.recent(10).map((x) => x.ref)).toEqual(['aaaaaaad', 'aaaaaaae', 'aaaaaaaf']); // ring of 3
    // copytruncate-style: the same file cut and written again (shorter than what was read: detected by size).
    fs.writeFileSync(p, l('aaaaaaag', 'ask'));
    f.poll();
    expect(got.at(-1)).toBe('aaaaaaag');
    expect((await f.byRef('aaaaaaag'))?.ref).toBe('aaaaaaag');
    expect(await f.byRef('../../x')).toBeNull();
    const counts = f.buckets().reduce((n, b) => n + (b.counts['network/block'] ?? 0), 0);
    expect(counts).toBe(6);
    f.close();
  });
  it('keeps a character whole that two writes cut in half, and streams a line that was partial at its start', () => {
    const p = path.join(dir, 'cut.jsonl');
    const line = Buffer.from(
      JSON.stringify({
        ts: new Date().toISOString(),
        ref: 'aaaaaaaz',
        uid: 1,
        surface: 'network',
        action: 'block',
        reason: '✓',
      }) + '\n',
    );
    const cut = line.indexOf(Buffer.from('✓')) + 1;
    fs.writeFileSync(p, line.subarray(0, cut));
    const got: string[] = [];
    const f = followDecisions({ path: p, onLine: (x) => got.push(x.reason), pollMs: 1_000_000, watch: false });
    fs.appendFileSync(p, line.subarray(cut));
    f.poll();
    expect(got).toEqual(['✓']);
    expect(f.stats().skipped).toBe(0);
    f.close();
  });
});

describe('console filters and charts over a summarized log', () => {
  it.each([
    ['block,ask', 'block', true],
    ['block,ask', 'ask', true],
    ['block,ask', 'allow', false],
    ['block,ask,would_block', 'would_block', true],
    ['would_block', 'block', false],
    ['block', 'block', true],
  ])('action filter %s lets %s through: %s', (action, got, want) => {
    expect(matches({ action }, { uid: 1, surface: 'network', action: got, reason: 'r' })).toBe(want);
  });

  it('counts the allows an allow_summary line stands for, less those written whole', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-l42-console-'));
    try {
      const p = path.join(dir, 'd.jsonl');
      const ts = new Date().toISOString();
      const line = (o: object) => JSON.stringify({ ts, uid: 1, surface: 'filesystem', rule: null, ...o }) + '\n';
      fs.writeFileSync(
        p,
        line({ ref: 'aaaaaaaa', action: 'allow', reason: 'allow_entry', subject: { path: '/x' } }) +
          line({
            ref: 'aaaaaaab',
            action: 'allow',
            reason: 'allow_summary',
            subject: { allowed: 500, written: 1, since: ts },
          }) +
          line({ ref: 'aaaaaaac', action: 'block', reason: 'deny_entry', subject: { path: '/y' } }),
      );
      const f = followDecisions({ path: p, onLine: () => {}, pollMs: 1_000_000 });
      const sum = (k: string) => f.buckets().reduce((n, b) => n + (b.counts[k] ?? 0), 0);
      expect(sum('filesystem/allow')).toBe(500);
      expect(sum('filesystem/block')).toBe(1);
      f.close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('serves the page, its scripts, its style and a favicon without the token, and an action list as a filter', async () => {
    const srv = await startConsole({
      config: () => {
        throw new Error('not read by these routes');
      },
      stateDir: os.tmpdir(),
      approvals: { list: async () => [], decide: async () => ({}) as never, subscribe: async () => () => {} },
      decisionsPath: null,
      socket: null,
      listen: '127.0.0.1:0',
      tls: null,
      isSubject: () => false,
      operatorUid: () => null,
    } as never);
    try {
      const get = (u: string, auth = false) =>
        fetch(`http://127.0.0.1:${srv.port}${u}`, auth ? { headers: { authorization: `Bearer ${srv.token}` } } : {});
      for (const [u, type] of [
        ['/', 'text/html'],
        ['/console.js', 'text/javascript'],
        ['/charts.js', 'text/javascript'],
        ['/console.css', 'text/css'],
        ['/favicon.svg', 'image/svg+xml'],
        ['/favicon.ico', 'image/svg+xml'],
      ] as const) {
        const r = await get(u);
        expect(r.status, u).toBe(200);
        expect(r.headers.get('content-type'), u).toContain(type);
      }
      expect((await get('/api/decisions?action=block,ask', true)).status).toBe(200);
      const bad = await get('/api/decisions?action=block;ask', true);
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('console_bad_request');
    } finally {
      await srv.close();
    }
  });
});

describe('console HTTP server: refusals and routes', () => {
  let dir = '';
  let srv: ConsoleServer;
  const decided: string[] = [];
  const req1: PendingView = {
    id: 'abcdefghijklmnop',
    uid: 2001,
    account: 'leash-x',
    surface: 'network',
    what: { domain: 'a.lab', ip: '198.18.1.1', port: 443 },
    rule: 'a.lab',
    created: '',
    deadline: '',
    persist: 'a.lab:443',
  };
  const approvals: ApprovalsPort = {
    list: () => Promise.resolve([req1]),
    decide: (id, d) => {
      if (id !== req1.id) return Promise.reject(new LeashError('approval_not_found', 'gone'));
      decided.push(`${id}:${d}`);
      return Promise.resolve({ action: d === 'deny' ? 'block' : 'allow', reason: `approved_${d}` });
    },
    subscribe: () => Promise.resolve(() => {}),
  };
  const call = (o: {
    path: string;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    socket?: boolean;
  }): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> =>
    new Promise((resolve, reject) => {
      const r = http.request(
        {
          ...(o.socket ? { socketPath: srv.socket! } : { host: '127.0.0.1', port: srv.port! }),
          path: o.path,
          method: o.method ?? 'GET',
          headers: o.headers,
        },
        (res) => {
          let b = '';
          res.on('data', (d: Buffer) => (b += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body: b, headers: res.headers }));
        },
      );
      r.on('error', reject);
      r.end(o.body);
    });
  const code = (r: { body: string }) => (JSON.parse(r.body) as { error?: { code: string } }).error?.code;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-console-srv-'));
    fs.writeFileSync(path.join(dir, 'leash.yaml'), `user: null\nlogging: { decisions: ${dir}/d.jsonl }\n`);
    fs.writeFileSync(path.join(dir, 'd.jsonl'), '');
    const config = loadConfig(path.join(dir, 'leash.yaml')).config;
    srv = await startConsole({
      config: () => config,
      stateDir: path.join(dir, 'state'),
      passwd: { path: path.join(dir, 'passwd') },
      metricsSocket: null,
      approvals,
      decisionsPath: path.join(dir, 'd.jsonl'),
      socket: path.join(dir, 'c.sock'),
      listen: null,
      tls: null,
      isSubject: (u) => u === 2001,
      operatorUid: () => null,
      // The test runs as root or not: the socket's peer is judged as a subject here, so only the token counts.
      peer: () => ({ pid: process.pid, uid: 2001, uids: [2001, 2001, 2001, 2001] }),
    });
    fs.writeFileSync(path.join(dir, 'passwd'), 'root:x:0:0::/:/bin/sh\n');
  });
  afterAll(async () => {
    await srv.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('on the socket a subject peer is refused even with the token (401 console_unauthorized)', async () => {
    const r = await call({ socket: true, path: '/api/approvals', headers: { authorization: `Bearer ${srv.token}` } });
    expect(r.status).toBe(401);
    expect(code(r)).toBe('console_unauthorized');
    // The page shell holds no data and is served, with the strict CSP.
    const page = await call({ socket: true, path: '/' });
    expect(page.status).toBe(200);
    expect(page.headers['content-security-policy']).toContain("default-src 'none'");
    expect(page.headers['content-security-policy']).toContain("script-src 'self'");
    expect(page.headers['content-security-policy']).not.toContain('unsafe');
  });
});

describe('console HTTP server on a loopback port', () => {
  let dir = '';
  let srv: ConsoleServer;
  const decided: string[] = [];
  const approvals: ApprovalsPort = {
    list: () => Promise.resolve([]),
    decide: (id, d) => {
      if (id !== 'abcdefghijklmnop') return Promise.reject(new LeashError('approval_not_found', 'gone'));
      decided.push(`${id}:${d}`);
      return Promise.resolve({ action: 'allow', reason: `approved_${d}` });
    },
    subscribe: () => Promise.resolve(() => {}),
  };
  const call = (o: {
    path: string;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
  }): Promise<{ status: number; body: string }> =>
    new Promise((resolve, reject) => {
      const r = http.request(
        { host: '127.0.0.1', port: srv.port!, path: o.path, method: o.method ?? 'GET', headers: o.headers },
        (res) => {
          let b = '';
          res.on('data', (d: Buffer) => (b += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body: b }));
        },
      );
      r.on('error', reject);
      r.end(o.body);
    });
  const code = (r: { body: string }) => (JSON.parse(r.body) as { error?: { code: string } }).error?.code;
  const auth = () => ({ authorization: `Bearer ${srv.token}` });

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-console-tcp-'));
    fs.writeFileSync(path.join(dir, 'leash.yaml'), `user: null\nlogging: { decisions: ${dir}/d.jsonl }\n`);
    fs.writeFileSync(path.join(dir, 'passwd'), 'root:x:0:0::/:/bin/sh\n');
    fs.writeFileSync(
      path.join(dir, 'd.jsonl'),
      JSON.stringify({
        ts: new Date().toISOString(),
        ref: 'aaaabbbb',
        uid: 5,
        surface: 'network',
        action: 'block',
        reason: 'r',
      }) + '\n',
    );
    const config = loadConfig(path.join(dir, 'leash.yaml')).config;
    // Port 0 is refused by the config schema (a real port is configured); the server itself takes any.
    srv = await startConsole({
      config: () => config,
      stateDir: path.join(dir, 'state'),
      passwd: { path: path.join(dir, 'passwd') },
      metricsSocket: null,
      approvals,
      decisionsPath: path.join(dir, 'd.jsonl'),
      socket: null,
      listen: '127.0.0.1:0',
      tls: null,
      isSubject: () => false,
      operatorUid: () => null,
    });
  });
  afterAll(async () => {
    await srv.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('prints a URL with the token in its fragment', () => {
    expect(srv.url).toBe(`http://127.0.0.1:${srv.port}/#token=${srv.token}`);
  });

  it('no token: 401; a wrong token: 401; the token: 200', async () => {
    expect((await call({ path: '/api/subjects' })).status).toBe(401);
    const wrong = await call({
      path: '/api/subjects',
      headers: { authorization: 'Bearer ' + (srv.token[0] === 'x' ? 'y' : 'x') + srv.token.slice(1) },
    });
    expect([wrong.status, code(wrong)]).toEqual([401, 'console_unauthorized']);
    expect((await call({ path: '/api/subjects', headers: auth() })).status).toBe(200);
  });

  it('a foreign Origin is refused (403), even with the token; the own Origin passes', async () => {
    const r = await call({ path: '/api/subjects', headers: { ...auth(), origin: 'http://evil.example' } });
    expect([r.status, code(r)]).toEqual([403, 'console_origin_refused']);
    const own = await call({ path: '/api/subjects', headers: { ...auth(), origin: `http://127.0.0.1:${srv.port}` } });
    expect(own.status).toBe(200);
    const nul = await call({ path: '/api/subjects', headers: { ...auth(), origin: 'null' } });
    expect(nul.status).toBe(403);
  });

  it('a foreign Host (DNS rebinding) is refused (421)', async () => {
    const r = await call({ path: '/api/subjects', headers: { ...auth(), host: `rebind.example:${srv.port}` } });
    expect([r.status, code(r)]).toEqual([421, 'console_host_refused']);
  });

  it('no state-changing GET: the decide route is POST only, with a JSON body', async () => {
    const g = await call({ path: '/api/approvals/abcdefghijklmnop?decision=once', headers: auth() });
    expect([g.status, code(g)]).toEqual([405, 'console_method_refused']);
    const form = await call({
      path: '/api/approvals/abcdefghijklmnop',
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/x-www-form-urlencoded' },
      body: 'decision=once',
    });
    expect([form.status, code(form)]).toEqual([403, 'console_origin_refused']);
    const bad = await call({
      path: '/api/approvals/abcdefghijklmnop',
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: '{"decision":"always"}',
    });
    expect([bad.status, code(bad)]).toEqual([400, 'console_bad_request']);
    expect(decided).toEqual([]);
    const ok = await call({
      path: '/api/approvals/abcdefghijklmnop',
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: '{"decision":"session"}',
    });
    expect(ok.status).toBe(200);
    expect(decided).toEqual(['abcdefghijklmnop:session']);
    const gone = await call({
      path: '/api/approvals/bbbbbbbbbbbbbbbb',
      method: 'POST',
      headers: { ...auth(), 'content-type': 'application/json' },
      body: '{"decision":"deny"}',
    });
    expect([gone.status, code(gone)]).toEqual([404, 'approval_not_found']);
    for (const m of ['PUT', 'DELETE', 'PATCH', 'OPTIONS'])
      expect((await call({ path: '/api/approvals', method: m, headers: auth() })).status).toBe(405);
  });

  it('decisions: the latest lines, a ref detail, a malformed filter is 400, an unknown ref 404', async () => {
    const d = await call({ path: '/api/decisions?action=block', headers: auth() });
    expect((JSON.parse(d.body) as { lines: { ref: string }[] }).lines.map((x) => x.ref)).toEqual(['aaaabbbb']);
    const one = await call({ path: '/api/decisions/aaaabbbb', headers: auth() });
    expect((JSON.parse(one.body) as { line: { ref: string } }).line.ref).toBe('aaaabbbb');
    expect((await call({ path: '/api/decisions/zzzzzzzz', headers: auth() })).status).toBe(404);
    expect((await call({ path: '/api/decisions?uid=abc', headers: auth() })).status).toBe(400);
  });
});
