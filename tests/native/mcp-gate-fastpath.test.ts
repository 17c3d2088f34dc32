// The gate with its native pre-check (canonical lines forwarded as received, plain responses never
// built as objects, plain tools/calls judged by the native judge) must behave exactly as the gate
// without it (every line parsed, judged in JavaScript and re-written):
// the same session, run both ways in front of the same fake server, gives the same client output,
// the same bytes at the server, the same decision log (but for time and ref) and the same exit.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { GATE_ENGINE } from '../../src/tools/judge/compile.js';
import { maskString } from '../../src/tools/judge/redact.js';
import { createMcpGate } from '../../src/tools/gate/gate.js';
import { createLocalJudge } from '../../src/tools/judge/judge.js';
import { compileGatePolicy } from '../../src/tools/judge/compile.js';
import { validateGatePolicy } from '../../src/tools/judge/policy-file.js';
import { nativeAnswerReader, nativeLineScanner, plainRequest, type LineScanner } from '../../src/tools/gate/scan.js';
import { mulberry32 } from '../lab/prng.js';
import { createDecisionLog } from '../../src/log/decisions.js';
import { nativeAvailable } from '../../src/native.js';

const FAKE = path.resolve(import.meta.dirname, '..', 'fixtures', 'mcp', 'fake-server.mjs');

const POLICY = {
  tools: {
    mode: 'whitelist',
    allow: ['read_file', 'search', 'Delete_All'],
    deny: ['delete_all'],
    hide_denied: true,
    deny_methods: ['resources/*'],
    args: { read_file: { deny: { '**.path': ['^/etc/'] }, allow: { path: ['^/srv/'] } } },
  },
};

/** Rules over operations (the filesystem table) on a tree the test makes: the native judge reads the path too. */
function opsPolicy(tree: string, mapping = 'filesystem') {
  return {
    tools: {
      mapping,
      default: 'deny',
      workspace: tree,
      rules: [
        { id: 'no-env', effect: 'deny', operations: ['fs.*'], resources: ['**/.env'] },
        { id: 'tree', effect: 'allow', operations: ['fs.read'], resources: [`${tree}/**`] },
        { id: 'srv', effect: 'ask', operations: ['fs.read'], resources: ['/srv/**'] },
      ],
    },
  };
}

/** The tree the sessions under rules over operations read: two files, a .env, a symlink to a directory. */
function makeTree(dir: string): string {
  const tree = path.join(dir, 'tree');
  fs.mkdirSync(path.join(tree, 'sub'), { recursive: true });
  for (const f of ['a.txt', 'sub/b.txt', '.env']) fs.writeFileSync(path.join(tree, f), 'x');
  fs.symlinkSync('sub', path.join(tree, 'link'));
  return tree;
}

/** A session under rules over operations: reads allowed by a rule, denied, asked, relative, through a symlink. */
function opsSession(seed: number, tree: string): string[] {
  const r = mulberry32(seed);
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  const lines = ['{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}'];
  for (let i = 1; i <= 300; i++) {
    const p = pick([
      `${tree}/a.txt`,
      `${tree}/sub/b.txt`,
      `${tree}/sub/b.txt`,
      `${tree}/.env`,
      `${tree}/link/b.txt`,
      `${tree}/sub/../a.txt`,
      'a.txt',
      '/etc/passwd',
      '/srv/x',
      `${tree}/me@x.io`,
    ]);
    const name = pick(['read_file', 'read_text_file', 'read_file', 'list_directory', 'write_file']);
    lines.push(
      `{"jsonrpc":"2.0","id":${i},"method":"tools/call","params":{"name":"${name}","arguments":{"path":"${p}"}}}`,
    );
  }
  return lines;
}

/** A session: mostly canonical lines, with look-alikes, whitespace, escapes and refusals mixed in. */
function session(seed: number): string[] {
  const r = mulberry32(seed);
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  const lines = ['{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}'];
  for (let i = 1; i <= 300; i++) {
    const id = r() < 0.7 ? String(i) : `"s${i}"`;
    const body = pick([
      `"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/${i}.txt"}}`,
      `"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/etc/shadow"}}`,
      `"method":"tools/call","params":{"name":"search","arguments":{"q":"caf\\u00e9 ${i}"}}`,
      `"method":"tools/call","params":{"name":"delete_all","arguments":{}}`,
      `"method":"tools/call","params":{"name":"\\uff44elete_all"}}`,
      `"method":"tools/list"`,
      `"method":"ping"`,
      `"method":"resources/read","params":{"uri":"file:///x"}}`,
      `"method":"tools/call","params":{"name":"search","arguments":{"q":"token=ghp_${'a'.repeat(36)}"}}`,
    ]);
    let line = `{"jsonrpc":"2.0","id":${id},${body}}`;
    const k = r();
    if (k < 0.1)
      line = line.replace(/,/g, ', '); // valid, not canonical
    else if (k < 0.15)
      line = line.replace('"jsonrpc"', '"JSONRPC"'); // another spelling: refused
    else if (k < 0.2)
      line = line.replace('{"jsonrpc":"2.0"', '{"jsonrpc":"2.0","jsonrpc":"2.0"'); // duplicate
    else if (k < 0.25)
      line = line.replace('"tools/call"', '"tools\\/call"'); // valid, re-written
    else if (k < 0.28) line = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"n":${i}}}`;
    lines.push(line);
  }
  return lines;
}

interface Outcome {
  code: number;
  client: string[];
  server: string;
  log: string[];
  /** Calls the JavaScript judge was asked to judge. */
  judged: number;
}

interface RunOptions {
  /** Write the calls in pieces cut at random bytes (this seed), each read by the gate on its own. */
  pieces?: number;
  /** Write these pieces after initialize instead of the lines after it. */
  chunks?: string[];
  /** $FAKE_MODE. */
  mode?: string;
  /** Counts what the chunk readers took: lines, and reads that took two or more. */
  seen?: { requests: number; requestReads: number; answers: number; answerReads: number };
}

async function run(
  lines: string[],
  scanner: LineScanner | null,
  dir: string,
  policy: unknown = POLICY,
  serverName?: string,
  opts: RunOptions = {},
): Promise<Outcome> {
  const record = path.join(dir, `received-${scanner ? 'fast' : 'slow'}.jsonl`);
  const logFile = path.join(dir, `decisions-${scanner ? 'fast' : 'slow'}.jsonl`);
  const p = validateGatePolicy(policy);
  const log = createDecisionLog({ sink: logFile, coalesceAllows: true });
  const local = createLocalJudge({
    policy: compileGatePolicy(p.tools, p.failMode, GATE_ENGINE),
    log,
    uid: 4242,
    mask: maskString,
  });
  let judged = 0;
  const seen = opts.seen;
  const nat = local.native;
  const judge: typeof local = {
    ...local,
    judge: (m, params, n) => {
      judged++;
      return local.judge(m, params, n);
    },
    ...(nat && seen
      ? {
          native: {
            ...nat,
            requests: (c: Buffer, at: number) => {
              const k = nat.requests(c, at);
              seen.requests += k;
              if (k > 1) seen.requestReads++;
              return k;
            },
          },
        }
      : {}),
  };
  const reader = scanner && seen ? nativeAnswerReader() : undefined;
  const answers = reader && {
    out: reader.out,
    read: (c: Buffer, at: number) => {
      const k = reader.read(c, at);
      seen!.answers += k;
      if (k > 1) seen!.answerReads++;
      return k;
    },
  };
  const input = new PassThrough();
  let out = '';
  const output = new Writable({
    write(c: Buffer, _e, cb) {
      out += c.toString('utf8');
      cb();
    },
  });
  const gate = createMcpGate({
    judge,
    command: [process.execPath, FAKE],
    timeoutMs: 10_000,
    graceMs: 2_000,
    input,
    output,
    errout: new Writable({ write: (_c, _e, cb) => cb() }),
    env: {
      ...process.env,
      FAKE_RECORD: record,
      FAKE_MODE: opts.mode ?? '',
      ...(serverName ? { FAKE_NAME: serverName } : {}),
    },
    scanner,
    ...(answers ? { answers } : {}),
  });
  // initialize answered first, then the rest: under `mapping: auto` the server's name picks the table, and both
  // runs must judge every call with it known.
  input.write(lines[0] + '\n');
  // (Up to 20 s: on a loaded machine a late answer would let the rest be judged before the table is known.)
  for (let t = 0; !out.includes('"id":0') && t < 2000; t++) await new Promise((r) => setTimeout(r, 10));
  if (!out.includes('"id":0')) throw new Error('the gate did not answer initialize within 20 s');
  const rest = Buffer.from(lines.slice(1).join('\n') + '\n');
  if (opts.chunks !== undefined) {
    for (const c of opts.chunks) {
      input.write(c);
      await new Promise((res) => setImmediate(res));
    }
    input.end();
  } else if (opts.pieces === undefined) input.end(rest);
  else {
    const r = mulberry32(opts.pieces);
    for (let at = 0; at < rest.length;) {
      const n = 1 + Math.floor(r() * (r() < 0.3 ? 150 : 4000));
      input.write(rest.subarray(at, at + n));
      at += n;
      await new Promise((res) => setImmediate(res));
    }
    input.end();
  }
  const code = await gate.done;
  await log.close();
  const strip = (l: string) => l.replace(/^\{"ts":"[^"]*","ref":"[a-z2-7]{8}"/, '{');
  return {
    code,
    // A denial's error carries its log line's ref (random): compared without it.
    client: out
      .split('\n')
      .filter(Boolean)
      .map((l) => l.replace(/"ref":"[a-z2-7]{8}"/, '"ref":"-"'))
      .sort(),
    server: fs.readFileSync(record, 'utf8'),
    log: fs.readFileSync(logFile, 'utf8').split('\n').filter(Boolean).map(strip).sort(),
    judged,
  };
}

describe.skipIf(!nativeAvailable())('the gate’s native fast path changes nothing but speed', () => {
  it.each([1, 2, 3])('session seed %i: same client output, server input, log and exit', async (seed) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-fastpath-'));
    try {
      const lines = session(seed);
      const slow = await run(lines, null, dir);
      const fast = await run(lines, nativeLineScanner(), dir);
      expect(fast.code).toBe(slow.code);
      expect(fast.server).toBe(slow.server);
      expect(fast.client).toEqual(slow.client);
      expect(fast.log).toEqual(slow.log);
      // The session exercised both paths: answers, refusals and denials.
      expect(slow.client.length).toBeGreaterThan(250);
      expect(slow.client.some((l) => l.includes('"error"'))).toBe(true);
      expect(slow.log.some((l) => l.includes('"action":"allow"'))).toBe(true);
      expect(slow.log.some((l) => l.includes('"action":"block"'))).toBe(true);
      // The native judge took the plain allowed calls (the first of its kind is JavaScript's, which registers it).
      expect(fast.judged).toBeLessThan(slow.judged - 10);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [1, 'filesystem'],
    [2, 'filesystem'],
    [3, 'auto'],
  ])(
    'under rules over operations, session seed %i, mapping %s: same client output, server input, log and exit',
    async (seed, mapping) => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-fastpath-'));
      try {
        const tree = makeTree(dir);
        const lines = opsSession(seed, tree);
        // Under auto, the fake server answers as @modelcontextprotocol/server-filesystem does.
        const name = mapping === 'auto' ? 'secure-filesystem-server' : undefined;
        const slow = await run(lines, null, dir, opsPolicy(tree, mapping), name);
        const fast = await run(lines, nativeLineScanner(), dir, opsPolicy(tree, mapping), name);
        expect(fast.code).toBe(slow.code);
        expect(fast.server).toBe(slow.server);
        expect(fast.client).toEqual(slow.client);
        expect(fast.log).toEqual(slow.log);
        expect(slow.log.filter((l) => l.includes('"reason":"operation_allowed"')).length).toBeGreaterThan(50);
        expect(slow.log.some((l) => l.includes('"reason":"operation_denied"'))).toBe(true);
        // The native judge took most of the allowed reads (the first of each path and tool is JavaScript's).
        // (About 50 fewer on a quiet machine; fewer when another process's mount makes the walk cache forget, as
        // tests running beside this one do.)
        expect(fast.judged).toBeLessThan(slow.judged - 10);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it.each([
    [4, 'names'],
    [5, 'names'],
    [6, 'operations'],
  ])(
    'input cut at random bytes (seed %i, %s) and answers read several at once: the chunk readers change nothing',
    async (seed, kind) => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-fastpath-'));
      try {
        const tree = makeTree(dir);
        const ops = kind === 'operations';
        // Plain calls in runs (what the chunk readers take), the session's mix between them.
        const mixed = ops ? opsSession(seed, tree) : session(seed);
        const lines = [mixed[0]!];
        for (let i = 1; i < mixed.length; i++) {
          lines.push(mixed[i]!);
          if (i % 3 === 0) {
            const p = ops ? `${tree}/a.txt` : '/srv/x.txt';
            // A run of plain calls, one answered with a secret (masked: not forwarded as it came), one of another
            // method with the same params (judged as that method), one with a string id.
            const odd = [
              '"method":"tools/call","params":{"name":"leak","arguments":{}}',
              `"method":"prompts/get","params":{"name":"read_file","arguments":{"path":"${p}"}}`,
            ][i % 2]!;
            for (let k = 0; k < 6; k++) {
              const id = k === 5 ? `"x${i}"` : 10_000 + i * 10 + k;
              const body =
                k === 3 ? odd : `"method":"tools/call","params":{"name":"read_file","arguments":{"path":"${p}"}}`;
              lines.push(`{"jsonrpc":"2.0","id":${id},${body}}`);
            }
          }
        }
        const policy = ops ? opsPolicy(tree) : { tools: { ...POLICY.tools, allow: [...POLICY.tools.allow, 'leak'] } };
        const o = { pieces: seed, mode: 'coalesce' };
        const seen = { requests: 0, requestReads: 0, answers: 0, answerReads: 0 };
        const slow = await run(lines, null, dir, policy, undefined, o);
        const fast = await run(lines, nativeLineScanner(), dir, policy, undefined, { ...o, seen });
        expect(fast.code).toBe(slow.code);
        expect(fast.server).toBe(slow.server);
        expect(fast.client).toEqual(slow.client);
        expect(fast.log).toEqual(slow.log);
        // The secret was masked, and prompts/get judged as itself.
        expect(slow.client.some((l) => l.includes('Q'.repeat(16)))).toBe(false);
        if (!ops) expect(slow.client.filter((l) => l.includes('key AKIA****')).length).toBeGreaterThan(10);
        // Both readers took whole runs of lines in one call, many times.
        expect(seen.requestReads).toBeGreaterThan(10);
        expect(seen.answerReads).toBeGreaterThan(10);
        expect(seen.requests).toBeGreaterThan(200);
        expect(seen.answers).toBeGreaterThan(200);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it('an id in use in the middle of a chunk the native judge allows: refused there, the rest judged as before', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-fastpath-'));
    try {
      const call = (id: number | string) =>
        `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/${id}.txt"}}}`;
      // The first call teaches the native judge the tool; then one piece: two allowed calls, the second's id again
      // (in use: the first is waiting for its answer), one more; then a piece of a call cut in the middle.
      const piece = [call(2), call(3), call(3), call(4), call(5)].join('\n') + '\n' + call(6).slice(0, 40);
      const lines = ['{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}'];
      const chunks = [call(1) + '\n', piece, call(6).slice(40) + '\n'];
      const outcome = (scanner: LineScanner | null, seen?: RunOptions['seen']) =>
        run(lines, scanner, dir, POLICY, undefined, { chunks, ...(seen ? { seen } : {}) });
      const seen = { requests: 0, requestReads: 0, answers: 0, answerReads: 0 };
      const slow = await outcome(null);
      const fast = await outcome(nativeLineScanner(), seen);
      expect({ ...fast, judged: 0 }).toEqual({ ...slow, judged: 0 });
      expect(slow.client.filter((l) => l.includes('id_in_use'))).toHaveLength(1);
      expect(slow.server.match(/"id":3,/g)).toHaveLength(1);
      expect(slow.server).toContain('"id":6,');
      // The native reader took calls 2 and 3 and stopped at the id in use.
      expect(seen.requestReads).toBeGreaterThanOrEqual(1);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads each line’s own method when the last line’s has the same length (the reader keeps the last one)', () => {
    const sc = nativeLineScanner()!;
    // tools/list and tools/call are both 10 bytes: a tools/call read as tools/list would skip the policy.
    const methods = ['tools/list', 'tools/call', 'tools/call', 'tools/list', 'tools/cal1', 'tools/call', 'ping'];
    const got = methods.map((m, i) => {
      const line = Buffer.from(`{"jsonrpc":"2.0","id":${i},"method":"${m}","params":{"name":"x"}}`);
      expect(sc.scan(line)).toBe(true);
      return plainRequest(line, sc.facts)?.method;
    });
    expect(got).toEqual(methods);
  });
});
