// The gate's native judge of plain tools/calls (native/tools/gatejudge.cc, src/tools/judge/native.ts)
// against its definition, the JavaScript judge (src/tools/judge/decide.ts judgeRequest): whenever the
// native judge answers a tool's index, the JavaScript judge must allow that very call by the registry
// alone (no finding, no argument rule refusing it) and name that tool. Generated policies (modes,
// inspection settings, strict_args, argument rules of every kind: literals, deterministic atoms, RE2-only
// patterns, types, deny paths in other cases) and generated calls full of near misses (denied values,
// `..`, detector material, other types, nested keys, arrays, escapes, extra members), from fixed seeds.
import { describe, expect, it } from 'vitest';
import { stringifyAscii, type JsonValue } from '../../src/formats/json.js';
import { nativeLineScanner, parseScanned, plainRequest } from '../../src/tools/gate/scan.js';
import { compileGatePolicy, type CompiledGatePolicy, type ToolsGatePolicy } from '../../src/tools/judge/compile.js';
import { judgeRequest, type Judgment } from '../../src/tools/judge/decide.js';
import { CHUNK_LINES, createNativeCallJudge } from '../../src/tools/judge/native.js';
import { walkChunks } from './chunk-walk.js';
import { nativeAvailable } from '../../src/native.js';
import { mulberry32 as prng } from '../lab/prng.js';
import { gen } from '../unit/engine/fixtures/inspect-gen.js';

const NAMES = [
  'read_file',
  'write_file',
  'search',
  'run',
  'Tool_B',
  'list_allowed_directories',
  'ｒｅａｄ',
  'odd name',
  'x"y',
];
const KEYS = ['path', 'q', 'n', 'opts', 'a', 'b', 'Path', 'PATH', 'key', 'x y', 'flag', 'deep', 'list', 'cmd'];
const PATTERNS = [
  '^/etc/',
  '\\.\\.',
  'secret$',
  '^abc$',
  'x',
  '^/srv/[a-z/]+\\.txt$',
  '^[a-z]+$',
  '^[0-9]*$',
  '^a?b+c*$',
  '^/srv/[a-z./]*$',
  '^(a|b)+$',
  '[^x]',
  '^x{2}$',
  '^(?!/etc)/.*',
  '^/[a-z]+/\\.\\./',
  '^-?[0-9]+$',
  'rm -rf',
  '^a b$',
  '^(true|false)$',
];
const ARG_PATHS = [
  'path',
  'q',
  'n',
  'opts.*',
  'opts.**',
  '**',
  'a.**.b',
  '*',
  'deep.x',
  'PATH',
  'flag',
  'key',
  'list',
  'list.*',
  'list.0',
  'cmd.*.b',
];
const TYPES = ['string', 'number', 'boolean', 'null', 'object', 'array'];
const STRINGS = [
  '/srv/data/file.txt',
  '/srv/../etc/passwd',
  '/srv/a/..',
  '..',
  'a..b',
  'abc',
  'ABC',
  'secret',
  'my secret',
  '/etc/passwd',
  'xx',
  'bbbc',
  'sudo ls',
  'a@b.com',
  '4111111111111111',
  '+442079460958',
  'xoxb-1234567890-abcdef',
  '',
  '123',
  '-5',
  'true',
  'sk-',
  'su',
  'hello world',
];

function generator(seed: number) {
  const r = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const g = gen(prng(seed + 1000));
  const rule = (): unknown => {
    const k = r();
    if (k < 0.6) return pick(PATTERNS);
    if (k < 0.8) return { type: pick(TYPES) };
    return { type: pick(TYPES), pattern: pick(PATTERNS) };
  };
  const rules = () => {
    const m: Record<string, unknown[]> = {};
    const n = 1 + Math.floor(r() * 3);
    for (let i = 0; i < n; i++) m[pick(ARG_PATHS)] = Array.from({ length: 1 + Math.floor(r() * 2) }, rule);
    return m;
  };
  const policy = (): ToolsGatePolicy => {
    const mode = r() < 0.75 ? 'whitelist' : 'blacklist';
    const names = NAMES.filter(() => r() < 0.6);
    const allow = names.filter(() => r() < 0.8);
    const deny = NAMES.filter((n) => !allow.includes(n) && r() < 0.3);
    const ask = NAMES.filter((n) => !allow.includes(n) && !deny.includes(n) && r() < 0.2);
    const args: Record<string, unknown> = {};
    for (const n of NAMES) {
      if (r() < 0.6) continue;
      const a: Record<string, unknown> = {};
      const k = r();
      if (k < 0.15) a.allow = '*';
      else if (k < 0.8) a.allow = rules();
      if (r() < 0.5) a.deny = r() < 0.3 ? [pick(PATTERNS)] : rules();
      // Rules an array of scalars meets only joined (`a b`), or by its type.
      if (r() < 0.3)
        a.deny = {
          ...(Array.isArray(a.deny) ? { '**': a.deny } : (a.deny as object)),
          [pick(['list', '**', '*'])]: [
            pick(['^a b$', { type: 'string', pattern: '^a b$' }, { type: 'array' }, { type: 'string', pattern: 'b$' }]),
          ],
        };
      if (!(n in args) && (a.allow !== undefined || a.deny !== undefined)) args[n] = a;
    }
    const act = () => pick(['block', 'log', 'allow'] as const);
    const p: Record<string, unknown> = { mode, allow, deny, ask, args, strict_args: r() < 0.3 };
    if (r() < 0.7) p.inspect = { secrets: act(), pii: act(), priv_esc: act() };
    return p as unknown as ToolsGatePolicy;
  };
  const value = (d: number): JsonValue => {
    const k = r();
    if (k < 0.35) return pick(STRINGS);
    if (k < 0.45) return g.string();
    if (k < 0.55) return Math.floor(r() * 2000) - 1000;
    if (k < 0.58) return r() < 0.5 ? r() * 10 : ['rm', '-rf', '/'];
    if (k < 0.64) return pick([true, false, null]);
    if (k < 0.74) {
      // Arrays: of scalars (read joined as well), empty, of objects, nested.
      if (r() < 0.5) return pick([['a', 'b'], ['a'], ['b', 'a'], ['a', 'b', 'c'], [], ['a', {}]]);
      const n = Math.floor(r() * 4);
      return Array.from({ length: n }, () => (r() < 0.8 || d > 3 ? pick([...STRINGS, 7, true, null]) : value(d + 1)));
    }
    if (k < 0.77) return pick(['tab\there', 'quote"d', 'é']);
    if (d > 3 || k < 0.82) return {};
    const o: Record<string, JsonValue> = {};
    const n = Math.floor(r() * 3);
    for (let i = 0; i < n; i++) o[pick(KEYS)] = value(d + 1);
    return o;
  };
  const call = (id: number): string => {
    const name = r() < 0.9 ? pick(NAMES) : pick(['READ_FILE', 'unknown', 'read_file\u200b', 'search ']);
    const params: Record<string, JsonValue> = {};
    const k = r();
    if (k < 0.1) params.arguments = {};
    else if (k < 0.15) params.arguments = pick(['x', 1, null, []]);
    else if (k > 0.2) {
      const a: Record<string, JsonValue> = {};
      const n = Math.floor(r() * 4);
      for (let i = 0; i < n; i++) a[pick(KEYS)] = value(1);
      params.arguments = a;
    }
    if (
      r() < 0.2 &&
      params.arguments !== undefined &&
      params.arguments !== null &&
      typeof params.arguments === 'object' &&
      !Array.isArray(params.arguments)
    )
      (params.arguments as Record<string, JsonValue>).list = pick([
        ['a', 'b'],
        ['b', 'a'],
        ['a', 'b', 'c'],
        ['a', 'b', {}],
      ]);
    const order = r() < 0.5;
    const out: Record<string, JsonValue> = {};
    if (order) out.name = name;
    if (params.arguments !== undefined) out.arguments = params.arguments;
    if (!order) out.name = name;
    // Members the judge ignores, and selectors or other spellings of one (refused by JavaScript).
    if (r() < 0.15)
      out[pick(['_meta', '_meta', 'progress', 'Name', 'NAME', 'na me', 'uri', 'ref', 'Arguments', 'x'])] =
        pick<JsonValue>([{}, 'x', { progressToken: 1 }, ['a', { b: 'c' }], 'tab\there', 'é', null]);
    if (r() < 0.02) delete out.name;
    return stringifyAscii({ jsonrpc: '2.0', id, method: 'tools/call', params: out });
  };
  return { policy, call };
}

/** What the native judge may only ever answer: the JavaScript judge allowing the call by its name alone. */
function allowedByName(j: Judgment): boolean {
  if (j.action !== 'allow' || !j.policed || j.wouldBlock !== undefined || j.op !== undefined) return false;
  const v = j.verdict;
  return (
    v !== undefined &&
    v.action === 'allow' &&
    v.at === undefined &&
    !v.findings?.length &&
    (v.reason === 'allow_entry' || v.reason === 'mode_allow')
  );
}

describe.skipIf(!nativeAvailable())('native gate judge = the JavaScript judge (never allows more)', () => {
  it('200 generated policies x 1,500 generated calls: every native allow is a JavaScript allow by name', () => {
    const scanner = nativeLineScanner()!;
    let compared = 0;
    let nativeAllows = 0;
    let jsAllows = 0;
    let withRules = 0;
    let withArrays = 0;
    let policies = 0;
    let runTaken = 0;
    let runs = 0;
    for (let seed = 1; seed <= 200; seed++) {
      const gn = generator(seed);
      let policy: CompiledGatePolicy;
      try {
        policy = compileGatePolicy(gn.policy(), 'closed');
      } catch {
        continue; // a generated policy the compiler refuses (two keys naming one tool): nothing to judge
      }
      const runLines = new Float64Array(new ArrayBuffer(8 * 5 * CHUNK_LINES));
      const nj = createNativeCallJudge(policy, undefined, undefined, runLines);
      if (nj === null) continue;
      policies++;
      const lines = Array.from({ length: 1500 }, (_, i) => Buffer.from(gn.call(i)));
      const judged: (Judgment | null)[] = [];
      // First the JavaScript judge, which registers what it allows by name (as the local judge does).
      for (const line of lines) {
        if (!scanner.scan(line)) {
          judged.push(null);
          continue;
        }
        const fast = plainRequest(line, scanner.facts)!;
        const params = fast.params === null ? undefined : parseScanned(line, fast.params[0], fast.params[1]);
        const j = judgeRequest('tools/call', params, policy);
        judged.push(j);
        if (j.action === 'allow' && j.name !== undefined) nj.learn(j.name, j, `tail:${j.name}`);
      }
      for (let i = 0; i < lines.length; i++) {
        const j = judged[i];
        if (j === null || j === undefined) continue;
        const line = lines[i]!;
        scanner.scan(line);
        const fast = plainRequest(line, scanner.facts)!;
        if (fast.params === null) continue;
        compared++;
        const k = nj.judge(line, fast.params[0], fast.params[1]);
        if (allowedByName(j)) jsAllows++;
        if (k < 0) continue;
        nativeAllows++;
        if (!allowedByName(j) || nj.tail(k, line) !== `tail:${j.name}`)
          expect.fail(`seed ${seed}: native allowed ${line.toString()} but JavaScript judged ${JSON.stringify(j)}`);
        if (policy.args.has(j.name!.toLowerCase())) withRules++;
        if (line.includes('[')) withArrays++;
      }
      // The same lines in chunks, read a run at a time as the gate reads them (NativeCallJudge.requests): each line
      // of a run is one the line-by-line path judges natively with the same answer, and each run ends at one it does not.
      const walked = walkChunks(
        seed,
        lines,
        {
          read: nj.requests,
          end: (k) => runLines[5 * k]!,
          answer: (k) => [runLines[5 * k + 1], runLines[5 * k + 2]],
          max: CHUNK_LINES,
        },
        (line) => {
          if (!scanner.scan(line)) return null;
          const fast = plainRequest(line, scanner.facts);
          if (fast?.method !== 'tools/call' || typeof fast.id !== 'number' || fast.params === null) return null;
          const k = nj.judge(line, fast.params[0], fast.params[1]);
          return k < 0 ? null : [fast.id, k];
        },
      );
      runTaken += walked.taken;
      runs += walked.runs;
    }
    // The comparison proves something only if both judges allowed and refused plenty.
    expect(policies).toBeGreaterThan(150);
    expect(compared).toBeGreaterThan(150_000);
    expect(nativeAllows).toBeGreaterThan(20_000);
    expect(withRules).toBeGreaterThan(5_000);
    expect(withArrays).toBeGreaterThan(1_500);
    expect(nativeAllows).toBeLessThan(jsAllows);
    expect(runTaken).toBeGreaterThan(15_000);
    expect(runs).toBeGreaterThan(1_000);
    console.log(
      `gatejudge-diff: ${policies} policies, ${compared} calls compared, JavaScript allowed ${jsAllows} by name, native ${nativeAllows} (${withRules} with argument rules, ${withArrays} with arrays); read in chunks: ${runTaken} calls taken in runs, ${runs} runs of two or more`,
    );
  });
});

describe.skipIf(!nativeAvailable())('native argument patterns = their JavaScript test (both ways)', () => {
  it('400 generated literal and deterministic patterns x 300 values: admitted natively exactly when test() says so', () => {
    const r = prng(99);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    const CLASSES = ['[a-z]', '[0-9]', '[a-c/]', '[xyz]', 'a', 'b', '/', '\\.', '-', '[A-Z_]', 'c'];
    const ALPHABET = 'abcxyz/.-_AZ09 ';
    const scanner = nativeLineScanner()!;
    let admitted = 0;
    let refused = 0;
    let patterns = 0;
    for (let p = 0; p < 400; p++) {
      let src = r() < 0.8 ? '^' : '';
      const n = 1 + Math.floor(r() * 5);
      for (let i = 0; i < n; i++) src += pick(CLASSES) + pick(['', '', '?', '*', '+']);
      if (r() < 0.6) src += '$';
      let policy: CompiledGatePolicy;
      try {
        policy = compileGatePolicy(
          {
            mode: 'whitelist',
            allow: ['t'],
            args: { t: { allow: { q: [src] } } },
            inspect: { secrets: 'allow', pii: 'allow', priv_esc: 'allow' },
          } as unknown as ToolsGatePolicy,
          'closed',
        );
      } catch {
        continue;
      }
      const re = policy.args.get('t')!.allow[0]!.rules[0]!.re!;
      if (re.native === undefined) continue; // left to RE2: the native judge never registers such a tool
      patterns++;
      const nj = createNativeCallJudge(policy)!;
      const first = judgeRequest('tools/call', { name: 't', arguments: {} }, policy);
      nj.learn('t', first, 'tail');
      for (let v = 0; v < 300; v++) {
        let s = '';
        const len = Math.floor(r() * 8);
        for (let i = 0; i < len; i++) s += ALPHABET[Math.floor(r() * ALPHABET.length)];
        const line = Buffer.from(
          stringifyAscii({ jsonrpc: '2.0', id: v, method: 'tools/call', params: { name: 't', arguments: { q: s } } }),
        );
        expect(scanner.scan(line)).toBe(true);
        const fast = plainRequest(line, scanner.facts)!;
        const native = nj.judge(line, fast.params![0], fast.params![1]) >= 0;
        const js = judgeRequest('tools/call', { name: 't', arguments: { q: s } }, policy).action === 'allow';
        if (native !== js) expect.fail(`pattern ${src} on ${JSON.stringify(s)}: native ${native}, JavaScript ${js}`);
        if (js) admitted++;
        else refused++;
      }
    }
    expect(patterns).toBeGreaterThan(200);
    expect(admitted).toBeGreaterThan(2_000);
    expect(refused).toBeGreaterThan(2_000);
  });
});
