/**
 * The approvals load test (#17 "A load test"), the whole service for real in the lab, at the default bounds: 1,000
 * requests pending at once across surfaces — 998 connections held by the proxy and the 2 opens or execs the watcher
 * holds (approvals.max_held_opens: every event it holds slows each other open of the group, docs/approvals.md "Load"),
 * all made by one leashed account that asks for 40 opens and 20 execs; the 58 beyond the watcher's bound are EPERM at
 * once (approval_limit). Decided by a script over the approvals socket (half of each surface's requests once, the
 * rest deny; every tenth decided twice at the same moment). Asserts: every request reaches the approver, is decided
 * exactly once (the second
 * decision is approval_not_found), and its action gets the outcome decided (no request lost, none answered twice);
 * another account's proxy and watcher traffic meanwhile goes on (every open and connection succeeds) at a rate
 * within the noise of before and after (measured and printed).
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import type { DecisionRecord } from '../../src/log/decisions.js';

const CLI = path.resolve(__dirname, '../../dist/src/cli/main.js');
const N_NET = 998;
/** The watcher's default bound on held opens and execs (approvals.max_held_opens). */
const N_HELD = 2;
const N_OPEN = 40;
const N_EXEC = 20;
const TOTAL = N_NET + N_HELD;

/** argv[2] threads each open(argv[1]) once: prints "ok=<n> eperm=<n> other=<n>". */
const OPENMANY_C = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static const char *file; static int ok, eperm, other; static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *one(void *a) { (void)a; int fd = open(file, O_RDONLY | O_CLOEXEC); int e = errno;
  pthread_mutex_lock(&mu); if (fd >= 0) { ok++; close(fd); } else if (e == EPERM) eperm++; else other++; pthread_mutex_unlock(&mu); return 0; }
int main(int c, char **v) { if (c < 3) return 2; file = v[1]; int n = atoi(v[2]); pthread_t *t = calloc(n, sizeof *t);
  pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, 65536);
  for (int i = 0; i < n; i++) pthread_create(&t[i], &at, one, 0);
  for (int i = 0; i < n; i++) pthread_join(t[i], 0);
  printf("ok=%d eperm=%d other=%d\\n", ok, eperm, other); return 0; }
`;
/** argv[2] children each exec argv[1] (stdout to /dev/null): prints "ran=<n> eperm=<n> other=<n>". */
const EXECMANY_C = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int c, char **v) { if (c < 3) return 2; int n = atoi(v[2]), ran = 0, eperm = 0, other = 0;
  for (int i = 0; i < n; i++) if (fork() == 0) { int d = open("/dev/null", O_WRONLY); dup2(d, 1);
    execl(v[1], v[1], (char *)0); _exit(errno == EPERM ? 100 : 101); }
  int st; while (wait(&st) > 0) { if (WIFEXITED(st) && WEXITSTATUS(st) == 0) ran++; else if (WIFEXITED(st) && WEXITSTATUS(st) == 100) eperm++; else other++; }
  printf("ran=%d eperm=%d other=%d\\n", ran, eperm, other); return 0; }
`;
/** open+close of argv[1] for argv[2] ms: prints "n=<opens> worst=<ms>". */
const HAMMER_C = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int c, char **v) { if (c < 3) return 2; double end = now() + atof(v[2]), worst = 0; long n = 0;
  while (now() < end) { double t = now(); int fd = open(v[1], O_RDONLY | O_CLOEXEC); double d = now() - t;
    if (d > worst) worst = d; if (fd >= 0) { close(fd); n++; } }
  printf("n=%ld worst=%.2f\\n", n, worst); return 0; }
`;
/** Node, as the account in the agent namespace: mode many (N held TLS connections) or rate (sequential for T ms). */
const TLS_JS = `const tls = require('node:tls');
const [mode, host, ip, n] = process.argv.slice(2);
const one = () => new Promise((res) => {
  const t0 = Date.now();
  const s = tls.connect({ host: ip, port: 443, servername: host, rejectUnauthorized: false });
  s.setTimeout(200000);
  s.once('secureConnect', () => { s.destroy(); res({ ok: true, ms: Date.now() - t0 }); });
  s.once('error', (e) => res({ ok: false, code: e.code, msg: e.message, ms: Date.now() - t0 }));
  s.once('timeout', () => { s.destroy(); res({ ok: false, code: 'TIMEOUT', ms: Date.now() - t0 }); });
});
(async () => {
  if (mode === 'many') {
    const rs = await Promise.all(Array.from({ length: Number(n) }, one));
    // How the failures failed (for a failing assertion's message): per error message, how many and when.
    const how = {};
    for (const r of rs.filter((r) => !r.ok)) {
      const k = r.code + ' ' + r.msg;
      const h = (how[k] = how[k] ?? { n: 0, minMs: r.ms, maxMs: r.ms });
      h.n++; h.minMs = Math.min(h.minMs, r.ms); h.maxMs = Math.max(h.maxMs, r.ms);
    }
    console.log(JSON.stringify({ ok: rs.filter((r) => r.ok).length, reset: rs.filter((r) => !r.ok && r.code === 'ECONNRESET').length, other: rs.filter((r) => !r.ok && r.code !== 'ECONNRESET').length, how }));
  } else {
    const end = Date.now() + Number(n); let k = 0, worst = 0, fail = 0;
    while (Date.now() < end) { const r = await one(); if (r.ok) k++; else fail++; worst = Math.max(worst, r.ms); }
    console.log(JSON.stringify({ n: k, worst, fail }));
  }
})();
`;

interface Spawned {
  out: Promise<string>;
}

describe.skipIf(!canRunLab)('approvals load: 1,000 pending across surfaces, decided by a script (root, lab)', () => {
  const lab = useLab('aload');
  let dir = '';
  let mnt = '';
  let env: NodeJS.ProcessEnv = {};
  let A: LabUser;
  let B: LabUser;
  let svcErr = '';
  const p = (...s: string[]) => path.join(mnt, ...s);
  const decisionsPath = () => path.join(dir, 'decisions.jsonl');

  /** Runs argv as the account in the agent namespace; resolves with its stdout. */
  const asUser = (u: LabUser, argv: string[], timeoutS = 240): Spawned => {
    const c = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.get().agentNs,
        'timeout',
        '-s',
        'KILL',
        String(timeoutS),
        'setpriv',
        `--reuid=${u.uid}`,
        `--regid=${u.gid}`,
        '--clear-groups',
        ...argv,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    c.stdout.on('data', (b: Buffer) => (out += b.toString()));
    c.stderr.on('data', (b: Buffer) => (out += b.toString()));
    return { out: new Promise((res) => c.on('close', () => res(out))) };
  };
  const good = () => LAB.hosts.find((h) => h.name === 'good.lab')!.v4;
  const other = () => LAB.hosts.find((h) => h.name === 'other.lab')!.v4;

  /** One approvals-socket client: JSON lines, requests matched by seq. */
  const client = async () => {
    const s = net.connect(path.join(dir, 'approvals.sock'));
    await new Promise<void>((res, rej) => s.once('connect', res).once('error', rej));
    let buf = '';
    let seq = 0;
    const waiting = new Map<number, (m: Record<string, unknown>) => void>();
    const events: Record<string, unknown>[] = [];
    s.on('data', (b: Buffer) => {
      buf += b.toString();
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const m = JSON.parse(buf.slice(0, i)) as Record<string, unknown>;
        buf = buf.slice(i + 1);
        if (typeof m.seq === 'number' && waiting.has(m.seq)) {
          waiting.get(m.seq)!(m);
          waiting.delete(m.seq);
        } else if (m.event) events.push(m);
      }
    });
    const call = (msg: Record<string, unknown>) =>
      new Promise<Record<string, unknown>>((res) => {
        const n = ++seq;
        waiting.set(n, res);
        s.write(`${JSON.stringify({ ...msg, seq: n })}\n`);
      });
    return { call, events, close: () => s.destroy() };
  };

  /** The other account's traffic for `ms`: opens on the marked tmpfs, then TLS connections through the proxy. */
  const otherTraffic = async (ms: number) => {
    const o = /n=(\d+) worst=([\d.]+)/.exec(await asUser(B, [p('bin', 'hammer'), p('open', 'b.txt'), String(ms)]).out);
    const t = JSON.parse(
      (await asUser(B, [process.execPath, p('bin', 'tls.js'), 'rate', 'good.lab', good(), String(ms)]).out).trim(),
    ) as { n: number; worst: number; fail: number };
    expect(o).not.toBeNull();
    return { opens: +o![1]!, opensWorst: +o![2]!, conns: t.n, connsWorst: t.worst, connFails: t.fail };
  };

  /** Three 0.5 s samples (this machine's noise is bimodal: a sample is compared by the best of three). */
  const slices = async () => [await otherTraffic(500), await otherTraffic(500), await otherTraffic(500)];

  beforeAll(async () => {
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'aload-'));
    fs.chmodSync(dir, 0o755);
    mnt = fs.mkdtempSync('/tmp/leash-tal-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'mode=0755,size=32m', 'tmpfs', mnt]);
    l.defer('unmount the load tmpfs', () => {
      execFileSync('umount', ['-l', mnt]);
      fs.rmdirSync(mnt);
    });
    for (const d of ['asked', 'open', 'bin']) fs.mkdirSync(p(d), { mode: 0o755 });
    fs.writeFileSync(p('asked', 'a.txt'), 'asked', { mode: 0o644 });
    fs.writeFileSync(p('open', 'b.txt'), 'open', { mode: 0o644 });
    fs.writeFileSync(p('bin', 'hello'), '#!/bin/sh\necho hello-ran\n', { mode: 0o755 });
    fs.writeFileSync(p('bin', 'tls.js'), TLS_JS, { mode: 0o644 });
    for (const [name, src] of [
      ['openmany', OPENMANY_C],
      ['execmany', EXECMANY_C],
      ['hammer', HAMMER_C],
    ] as const) {
      fs.writeFileSync(p('bin', `${name}.c`), src);
      execFileSync('cc', ['-O2', '-pthread', '-o', p('bin', name), p('bin', `${name}.c`)]);
    }
    A = await l.createUser('leash-tal1');
    B = await l.createUser('leash-tal2');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${A.name}:x:${A.uid}:${A.gid}::/nonexistent:/usr/sbin/nologin\n` +
        `${B.name}:x:${B.uid}:${B.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], ask: [other.lab], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: blacklist, ask: [${p('asked')}] }
commands: { mode: blacklist, ask: [${p('bin', 'hello')}] }
tools: { mode: whitelist }
enforcers: { network: true, filesystem: true, tools: false }
approvals: { deadlines: { network: 120, filesystem: 120, commands: 120 }, max_pending: ${TOTAL}, max_pending_per_subject: ${TOTAL} }
logging: { level: info, decisions: ${decisionsPath()} }
`,
    );
    env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_WATCHER_TIMEOUT_S: '600',
    };
    const svc = spawn(
      'ip',
      [
        'netns',
        'exec',
        l.agentNs,
        'timeout',
        '-s',
        'KILL',
        '600',
        process.execPath,
        CLI,
        '-c',
        path.join(dir, 'leash.yaml'),
      ],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    l.defer('stop leash service', () => stopChild(svc, 15_000));
    svc.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    await waitForServiceReady(svc, () => svcErr);
  }, 180_000);

  afterAll(() => {
    if (svcErr.trim()) process.stderr.write(`service stderr (tail):\n${svcErr.slice(-3000)}\n`);
  });

  it('1,000 pending requests decided by a script: none lost, none decided twice, other traffic unaffected', async () => {
    const sub = await client();
    expect(await sub.call({ op: 'subscribe' })).toMatchObject({ ok: true });
    await new Promise((r) => setTimeout(r, 300));
    const before = await slices();

    const conns = asUser(A, [process.execPath, p('bin', 'tls.js'), 'many', 'other.lab', other(), String(N_NET)]);
    const opens = asUser(A, [p('bin', 'openmany'), p('asked', 'a.txt'), String(N_OPEN)]);
    const execs = asUser(A, [p('bin', 'execmany'), p('bin', 'hello'), String(N_EXEC)]);
    const ctl = await client();
    const t0 = Date.now();
    let pending: { id: string; surface: string }[] = [];
    for (let i = 0; i < 600; i++) {
      const r = await ctl.call({ op: 'list' });
      pending = (r.requests as { id: string; surface: string }[]) ?? [];
      if (pending.length >= TOTAL) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    const bySurface = (xs: { surface: string }[]) =>
      xs.reduce<Record<string, number>>((m, x) => ((m[x.surface] = (m[x.surface] ?? 0) + 1), m), {});
    const counts = bySurface(pending);
    expect(counts.network, svcErr.slice(-2000)).toBe(N_NET);
    // The watcher holds its bound, whichever of the opens and execs came first.
    expect((counts.filesystem ?? 0) + (counts.commands ?? 0), JSON.stringify(counts)).toBe(N_HELD);
    const tPending = Date.now() - t0;
    const during = await slices();
    const t1 = Date.now();

    // The script: once for every other request of each surface (the first included), deny for the rest; every tenth
    // decided twice at the same moment. 499 approved connections connect upstream at once, right after 499 refused
    // ones were reset (the proxy deletes each reset connection's conntrack entry, forget.ts, so none of those
    // redirects is left for an upstream connection on the same port). An approved connection that does not complete
    // fails the test with how it failed and when (the client's error messages, the service's stderr).
    const want = new Map<string, 'once' | 'deny'>();
    const nth: Record<string, number> = {};
    const answers = await Promise.all(
      pending.map(async (q, i) => {
        const k = (nth[q.surface] = (nth[q.surface] ?? 0) + 1);
        const decision = k % 2 === 1 ? 'once' : 'deny';
        want.set(q.id, decision);
        const calls = [ctl.call({ op: 'decide', id: q.id, decision })];
        if (i % 10 === 0) calls.push(ctl.call({ op: 'decide', id: q.id, decision: i % 4 === 0 ? 'deny' : 'once' }));
        return Promise.all(calls);
      }),
    );
    const oks = answers.flat().filter((a) => a.ok === true).length;
    const notFound = answers
      .flat()
      .filter((a) => (a.error as { code?: string } | undefined)?.code === 'approval_not_found');
    const tDecided = Date.now() - t1;
    expect(oks).toBe(TOTAL);
    expect(notFound.length).toBe(Math.ceil(TOTAL / 10));

    const [n, o, e] = await Promise.all([conns.out, opens.out, execs.out]);
    const after = await slices();
    const once = (s: string) => pending.filter((q) => q.surface === s && want.get(q.id) === 'once').length;
    const netR = JSON.parse(n.trim()) as { ok: number; reset: number; other: number; how: object };
    // No denied connection passes and every approved one completes its handshake with the lab's server.
    const why = `${JSON.stringify(netR.how)} ${tDecided} ms to decide; service stderr: ${svcErr.slice(-1500)}`;
    expect({ ok: netR.ok, reset: netR.reset, other: netR.other }, why).toEqual({
      ok: once('network'),
      reset: N_NET - once('network'),
      other: 0,
    });
    // The approved opens and execs succeed; the denied ones and those beyond the watcher's bound are EPERM.
    expect(o.trim()).toBe(`ok=${once('filesystem')} eperm=${N_OPEN - once('filesystem')} other=0`);
    expect(e.trim()).toBe(`ran=${once('commands')} eperm=${N_EXEC - once('commands')} other=0`);

    // Each request decided exactly once, as the subscriber saw it and as the decision log tells it.
    await new Promise((r) => setTimeout(r, 1000));
    const decided = sub.events.filter((ev) => ev.event === 'decided').map((ev) => ev.id as string);
    expect(new Set(decided).size).toBe(TOTAL);
    expect(decided.length).toBe(TOTAL);
    const lines = fs
      .readFileSync(decisionsPath(), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as DecisionRecord);
    const outcomes = new Map<string, DecisionRecord[]>();
    for (const l of lines)
      if (l.action !== 'ask' && l.approval?.request)
        outcomes.set(l.approval.request, [...(outcomes.get(l.approval.request) ?? []), l]);
    // Every request has exactly one outcome line with the decided reason.
    for (const q of pending) {
      const mine = outcomes.get(q.id) ?? [];
      expect(mine.length, `${q.id} ${q.surface}`).toBe(1);
      expect([mine[0]!.surface, mine[0]!.reason]).toEqual([
        q.surface,
        want.get(q.id) === 'once' ? 'approved_once' : 'approval_denied',
      ]);
    }
    // The asks beyond the watcher's bound: each EPERM at once, with its approval_limit line and no request.
    const limited = lines.filter(
      (l) => l.reason === 'approval_limit' && (l.surface === 'filesystem' || l.surface === 'commands'),
    );
    expect(limited.length).toBe(N_OPEN + N_EXEC - N_HELD);
    for (const l of limited) expect([l.uid, l.action, l.approval?.request ?? null]).toEqual([A.uid, 'block', null]);
    sub.close();
    ctl.close();

    type T = Awaited<ReturnType<typeof otherTraffic>>;
    const row = (k: string, ts: T[]) =>
      `| ${k.padEnd(22)} | ${ts
        .map((t) => String(t.opens))
        .join(' / ')
        .padStart(22)} | ${ts
        .map((t) => String(t.conns))
        .join(' / ')
        .padStart(14)} | ${String(Math.max(...ts.map((t) => t.opensWorst))).padStart(8)} | ${String(
        Math.max(...ts.map((t) => t.connsWorst)),
      ).padStart(8)} |`;
    process.stdout.write(
      [
        `approvals load: ${TOTAL} pending (${JSON.stringify(counts)}; ${limited.length} opens and execs beyond the watcher's bound refused at once); load ${fs.readFileSync('/proc/loadavg', 'utf8').trim()}`,
        `all pending after ${tPending} ms; all decided by the script in ${tDecided} ms; network: ${netR.ok} of ${once('network')} approved connections completed their handshake`,
        "the other account's traffic, three 0.5 s samples each (opens on the marked tmpfs; TLS connections through the proxy):",
        '| when                   |         opens (samples) | conns (samples) | worst ms | worst ms |',
        row('before', before),
        row('during (1,000 pending)', during),
        row('after', after),
        '',
      ].join('\n'),
    );
    // The other account's traffic goes on while 1,000 are pending: every open and connection it makes succeeds, none
    // waits anywhere near a deadline, and its rate stays in the range of before and after: the best sample during the
    // load reaches half the median sample outside it (2 held events cost another process's opens nothing measurable:
    // bench/hold-herd, docs/approvals.md "Load"; the bound leaves room for a shared machine's noise).
    const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
    const outside = [...before, ...after];
    expect(Math.max(...during.map((t) => t.opens))).toBeGreaterThan(0.5 * median(outside.map((t) => t.opens)));
    expect(Math.max(...during.map((t) => t.conns))).toBeGreaterThan(0.5 * median(outside.map((t) => t.conns)));
    for (const t of during) expect(t.opens).toBeGreaterThan(0);
    for (const t of during) expect(t.opensWorst).toBeLessThan(5000);
    for (const t of during) expect(t.conns).toBeGreaterThan(0);
    for (const t of during) expect(t.connFails).toBe(0);
  }, 600_000);
});
