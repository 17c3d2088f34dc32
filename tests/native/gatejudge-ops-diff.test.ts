// The gate's native judge under rules over operations (native/tools/opsjudge_core.h, src/tools/judge/native.ts)
// against its definition, the JavaScript judge (decide.ts judgeRequest with operations/rules.ts and paths.ts, and
// judge.ts logJudgment for the line): whenever the native judge answers, the JavaScript judge must allow that very
// call and write the very same allow line. Generated rule sets (effects, operations, globs with classes, `?`, `*`,
// `**`, plain paths, rules that can never match a path, defaults) over a real tree in the test's own directory
// (directories, a symlink to a directory, a dangling one, missing names), generated calls full of near misses
// (`..`, `.`, `//`, a trailing `/`, relative and `~` paths, symlinked and non-ASCII names, detector material in the
// path, other argument types, listings, writes, arrays), and the tree changed under both judges as they go.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringifyAscii, type JsonValue } from '../../src/formats/json.js';
import { formatDecisionTail, type DecisionWriter } from '../../src/log/decisions.js';
import { nativeLineScanner, parseScanned, plainRequest } from '../../src/tools/gate/scan.js';
import { compileGatePolicy, type CompiledGatePolicy, type ToolsGatePolicy } from '../../src/tools/judge/compile.js';
import { judgeRequest, type GateSession } from '../../src/tools/judge/decide.js';
import { createLocalJudge, logJudgment, type LogContext } from '../../src/tools/judge/judge.js';
import { createNativeCallJudge } from '../../src/tools/judge/native.js';
import { createValidatedWalker } from '../../src/tools/judge/operations/paths.js';
import { maskString } from '../../src/tools/judge/redact.js';
import { nativeAvailable } from '../../src/native.js';
import { mulberry32 as prng } from '../lab/prng.js';

let root = '';

beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-opsdiff-'));
  for (const d of ['a/sub', 'b', 'srv']) fs.mkdirSync(path.join(root, d), { recursive: true });
  for (const f of ['a/x.txt', 'a/y.txt', 'a/.env', 'a/sub/z.txt', 'b/x.txt', 'e.txt', 'srv/f.txt'])
    fs.writeFileSync(path.join(root, f), 'x');
  fs.symlinkSync('a', path.join(root, 'c'));
  fs.symlinkSync('nowhere', path.join(root, 'd'));
});

afterAll(() => {
  if (root !== '') fs.rmSync(root, { recursive: true, force: true });
});

const GLOBS = [
  '$R/**',
  '$R/a/**',
  '$R/a',
  '$R/*/x.txt',
  '$R/[ab]/*.txt',
  '$R/[!a]/**',
  '$R/?/**',
  '**/.env',
  '$R/a/sub/**',
  '$R/c/**',
  '$R/*.txt',
  '$R/**/z.txt',
  '$R/a**',
  '$R/[a-c]',
  '$R/srv/**',
  '/tmp/**',
  '/etc/**',
  '**',
  '$R/b/x.txt',
  '$R/m/**',
];
const OPS = [['fs.read'], ['fs.write'], ['fs.*'], ['*'], ['fs.read', 'fs.write'], ['git.read'], ['net.request']];
const TOOLS = [
  'read_file',
  'read_file',
  'read_text_file',
  'get_file_info',
  'read_multiple_files',
  'list_directory',
  'write_file',
  'move_file',
  'not_in_table',
];
const PARTS = ['a', 'b', 'c', 'd', 'e.txt', 'x.txt', 'y.txt', '.env', 'sub', 'z.txt', 'm', 'srv', 'f.txt'];
const ODD = ['.', '..', '', 'é', 'me@x.io', 'AKIAIOSFODNN7EXAMPLE', 'a"b', 'a\\b', 'x'.repeat(190), 'A'];

function generator(seed: number) {
  const r = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const policy = (): ToolsGatePolicy => {
    const rules: Record<string, unknown>[] = [];
    const n = 1 + Math.floor(r() * 12);
    for (let i = 0; i < n; i++) {
      const rule: { operations?: string[]; [k: string]: unknown } = {
        id: `r${i}`,
        effect: pick(['allow', 'allow', 'deny', 'ask']),
      };
      if (r() < 0.85) rule.operations = pick(OPS);
      // Resources only on rules whose operations read paths (the compiler refuses them elsewhere).
      if (r() < 0.85 && rule.operations?.[0] !== 'net.request')
        rule.resources = Array.from({ length: 1 + Math.floor(r() * 3) }, () => pick(GLOBS).replace('$R', root));
      if (r() < 0.05) {
        rule.operations = ['net.request'];
        rule.hosts = ['example.com'];
        delete rule.resources;
      }
      if (r() < 0.05) {
        rule.operations = ['shell.exec', 'fs.read'];
        rule.commands = [['ls']];
      }
      rules.push(rule);
    }
    const tools: Record<string, unknown> = {
      mapping: 'filesystem',
      default: pick(['allow', 'deny', 'ask']),
      rules,
      workspace: root,
    };
    if (r() < 0.3) tools.inspect = { secrets: 'allow', pii: 'allow', priv_esc: 'allow' };
    if (r() < 0.15) tools.deny = ['get_file_info'];
    if (r() < 0.15) tools.args = { read_file: { deny: { path: ['\\.txt$'] } } };
    return tools as unknown as ToolsGatePolicy;
  };
  const pathArg = (): JsonValue => {
    const x = r();
    if (x < 0.03) return 42;
    if (x < 0.06) return [`${root}/a/x.txt`];
    const n = 1 + Math.floor(r() * 4);
    const parts = Array.from({ length: n }, () => (r() < 0.12 ? pick(ODD) : pick(PARTS)));
    const start = r();
    let p =
      start < 0.75
        ? `${root}/${parts.join('/')}`
        : start < 0.85
          ? parts.join('/')
          : start < 0.9
            ? `~/${parts.join('/')}`
            : `/${pick(['srv', 'etc', 'tmp'])}/${parts.join('/')}`;
    if (r() < 0.04) p += '/';
    if (r() < 0.03) p = p.replace('/', '//');
    return p;
  };
  const call = (id: number): string => {
    const name = pick(TOOLS);
    const args: Record<string, JsonValue> = {};
    if (name === 'read_multiple_files') args.paths = [pathArg() as string];
    else if (name === 'move_file') {
      args.source = pathArg();
      args.destination = pathArg();
    } else if (r() < 0.97) args.path = pathArg();
    if (r() < 0.2) args.n = 1;
    if (r() < 0.05) args.token = 'ghp_0123456789abcdefghij0123456789abcdef';
    if (r() < 0.03) args.path = { nested: `${root}/a/x.txt` };
    return stringifyAscii({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
  };
  return { policy, call };
}

/** Moves the tree under both judges: a directory becomes a symlink and back, a missing name appears and goes. */
function mutate(step: number): void {
  const a = path.join(root, 'a');
  const m = path.join(root, 'm');
  switch (step % 4) {
    case 0:
      fs.renameSync(a, path.join(root, 'a.real'));
      fs.symlinkSync('b', a);
      break;
    case 1:
      fs.unlinkSync(a);
      fs.renameSync(path.join(root, 'a.real'), a);
      break;
    case 2:
      fs.mkdirSync(m);
      fs.symlinkSync('/etc', path.join(m, 'n.txt'));
      break;
    case 3:
      fs.rmSync(m, { recursive: true });
      break;
  }
}

describe.skipIf(!nativeAvailable())(
  'native gate judge over operations = the JavaScript judge (never allows more)',
  () => {
    it('generated rule sets x generated calls on a changing tree: every native allow is a JavaScript allow, same line', () => {
      const scanner = nativeLineScanner()!;
      let compared = 0;
      let nativeAllows = 0;
      let byRule = 0;
      let byDefault = 0;
      let jsAllows = 0;
      let policies = 0;
      let mutations = 0;
      for (let seed = 1; seed <= 150; seed++) {
        const gn = generator(seed);
        let policy: CompiledGatePolicy;
        try {
          policy = compileGatePolicy(gn.policy(), 'closed');
        } catch {
          continue; // a generated rule the compiler refuses (hosts with no net.request, ...)
        }
        const walker = createValidatedWalker()!;
        try {
          const session: GateSession = { walker, serverName: null };
          const nj = createNativeCallJudge(policy, walker);
          expect(nj, `seed ${seed}: a filesystem table and a walker make a native judge`).not.toBeNull();
          policies++;
          let last = '';
          const log: DecisionWriter = {
            write: (rec) => ((last = formatDecisionTail(rec)), 'ref'),
            writeTail: (_a, tail) => ((last = tail), 'ref'),
          };
          const ctx: LogContext = { log, uid: 0, logArgs: policy.logArgs, mask: maskString, allowTails: new Map() };
          // A pool of calls, each made many times: the first times teach the native judge, later ones test it.
          const pool = Array.from({ length: 80 }, (_, i) => Buffer.from(gn.call(i)));
          const r = prng(seed * 7919);
          for (let i = 0; i < 1500; i++) {
            if (i % 300 === 299) {
              mutate(mutations++);
              walker.sync();
            }
            const line = pool[Math.floor(r() * pool.length)]!;
            if (!scanner.scan(line)) continue;
            const fast = plainRequest(line, scanner.facts)!;
            if (fast.params === null) continue;
            compared++;
            const k = nj!.judge(line, fast.params[0], fast.params[1]);
            const nativeTail = k >= 0 ? nj!.tail(k, line) : null;
            const params = parseScanned(line, fast.params[0], fast.params[1]);
            const j = judgeRequest('tools/call', params, policy, session);
            last = '';
            logJudgment(j, params, ctx);
            if (j.action === 'allow') jsAllows++;
            if (nativeTail !== null) {
              nativeAllows++;
              // A listing's answer is filtered by JavaScript (judge.ts j.filter): never the native judge's.
              if (j.action !== 'allow' || last !== nativeTail || j.op?.action.listing !== undefined)
                expect.fail(
                  `seed ${seed}: native allowed ${line.toString()} as ${nativeTail}but JavaScript judged ${JSON.stringify(j)}: ${last}`,
                );
              if (j.verdict?.rule === null) byDefault++;
              else byRule++;
            }
            if (j.action === 'allow' && j.name !== undefined) nj!.learn(j.name, j, ctx.allowTails!.get(j.name)?.tail);
          }
        } finally {
          walker.close();
          if (mutations % 2 === 1) mutate(mutations++); // the tree back as it was (a directory, no m)
        }
      }
      console.log(
        `gatejudge-ops-diff: ${policies} policies, ${compared} calls compared, ${mutations} tree changes, JavaScript allowed ${jsAllows}, native ${nativeAllows} (${byRule} by a rule, ${byDefault} by the default)`,
      );
      // The comparison proves something only if both judges allowed and refused plenty.
      expect(policies).toBeGreaterThan(120);
      expect(compared).toBeGreaterThan(150_000);
      expect(nativeAllows).toBeGreaterThan(8_000);
      expect(byRule).toBeGreaterThan(5_000);
      expect(byDefault).toBeGreaterThan(1_500);
      expect(nativeAllows).toBeLessThan(jsAllows);
    });
  },
);

describe.skipIf(!nativeAvailable())('native gate judge under mapping: auto', () => {
  it('takes calls once the server names its table, and none once another server name picks another', () => {
    const policy = compileGatePolicy(
      {
        mapping: 'auto',
        default: 'deny',
        workspace: root,
        rules: [{ id: 'tree', effect: 'allow', operations: ['fs.read'], resources: [`${root}/**`] }],
      } as unknown as ToolsGatePolicy,
      'closed',
    );
    const lines: string[] = [];
    const log: DecisionWriter = {
      write: (rec) => (lines.push(formatDecisionTail(rec)), 'ref'),
      writeTail: (_a, tail) => (lines.push(tail), 'ref'),
    };
    const judge = createLocalJudge({ policy, log, uid: 0, mask: maskString });
    const scanner = nativeLineScanner()!;
    const line = Buffer.from(
      `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"${root}/e.txt"}}}`,
    );
    const call = (): { native: number; action: string } => {
      expect(scanner.scan(line)).toBe(true);
      const fast = plainRequest(line, scanner.facts)!;
      const native = judge.native!.judge(line, fast.params![0], fast.params![1]);
      const j = judge.judge('tools/call', parseScanned(line, fast.params![0], fast.params![1]), false);
      return { native, action: (j as { action: string }).action };
    };
    try {
      // No table before the server's answer: JavaScript denies (unknown), the native judge has nothing.
      expect(call()).toEqual({ native: -1, action: 'deny' });
      judge.serverInfo!('secure-filesystem-server', '1');
      expect(call()).toEqual({ native: -1, action: 'allow' }); // learnt here
      expect(call().native).toBeGreaterThanOrEqual(0);
      // Another name, no table: what was learnt under the filesystem table no longer answers.
      judge.serverInfo!('another-server', '1');
      expect(call()).toEqual({ native: -1, action: 'deny' });
      judge.serverInfo!('secure-filesystem-server', '1');
      expect(call()).toEqual({ native: -1, action: 'allow' });
    } finally {
      judge.close?.();
    }
  });
});
