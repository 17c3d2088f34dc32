// The MCP gate's native pre-check (native/tools/jsonscan.cc) against its definition, the TypeScript
// strict parser and writer (src/tools/json.ts): whenever the scanner says 1 ("valid and
// canonical"), parseStrict must accept the line, stringifyAscii must give back the same bytes, and
// the top-level facts must be those of the parsed message. A fixed corpus plus 100,000 generated
// lines from a fixed seed, most of them one mutation away from canonical.
import { describe, expect, it } from 'vitest';
import { isObject, JsonError, parseStrict, stringifyAscii, type JsonValue } from '../../src/formats/json.js';
import {
  nativeAnswerReader,
  nativeLineScanner,
  parseScanned,
  plainRequest,
  plainResponseKey,
  SCAN,
} from '../../src/tools/gate/scan.js';
import { CHUNK_LINES } from '../../src/tools/judge/native.js';
import { ANSWER_LITERALS, lineMayHoldSecretJs } from '../../src/tools/judge/redact.js';
import { walkChunks } from './chunk-walk.js';
import { nativeAvailable } from '../../src/native.js';
import { mulberry32 as rng } from '../lab/prng.js';

const has = (o: object, k: string) => Object.prototype.hasOwnProperty.call(o, k);
const ENVELOPE = ['jsonrpc', 'id', 'method', 'params', 'result', 'error'];

/** The facts the scanner must report for a parsed top-level value. */
function expectedFacts(v: JsonValue): number {
  if (!isObject(v)) return 0;
  let f = SCAN.TOP_OBJECT;
  if (v.jsonrpc === '2.0') f |= SCAN.JSONRPC_OK;
  if (has(v, 'id')) f |= SCAN.HAS_ID;
  if (has(v, 'method')) f |= SCAN.HAS_METHOD;
  if (has(v, 'params')) f |= SCAN.HAS_PARAMS;
  if (has(v, 'result')) f |= SCAN.HAS_RESULT;
  if (has(v, 'error')) f |= SCAN.HAS_ERROR;
  if (isObject(v.error)) f |= SCAN.ERROR_OBJECT;
  if (Object.keys(v).some((k) => !ENVELOPE.includes(k))) f |= SCAN.OTHER_KEY;
  if (typeof v.id === 'number') f |= SCAN.ID_INT;
  if (isObject(v.params)) f |= SCAN.PARAMS_OBJECT;
  return f;
}

type Verdict = 'fast' | 'slow';

function check(scanner: NonNullable<ReturnType<typeof nativeLineScanner>>, text: string | Buffer): Verdict {
  const line = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  if (!scanner.scan(line)) return 'slow';
  const shown = line.toString('utf8').slice(0, 200);
  let v: JsonValue;
  try {
    v = parseStrict(line);
  } catch (e) {
    if (e instanceof JsonError) throw new Error(`scanner accepted a line parseStrict refuses (${e.code}): ${shown}`);
    throw e;
  }
  if (stringifyAscii(v) !== line.toString('latin1'))
    throw new Error(`scanner accepted a line the writer re-writes: ${shown} -> ${stringifyAscii(v).slice(0, 200)}`);
  // The gate reads a scanned span with JSON.parse (parseScanned): it must build what parseStrict builds.
  if (stringifyAscii(parseScanned(line, 0, line.length)) !== stringifyAscii(v))
    throw new Error(`JSON.parse reads a scanned line otherwise: ${shown}`);
  const f = scanner.facts[0]!;
  // ID_STRING and METHOD_STRING are only claimed for escape-free strings; compare the rest exactly.
  const mask = ~(SCAN.ID_STRING | SCAN.METHOD_STRING);
  if ((f & mask) !== expectedFacts(v)) throw new Error(`facts ${f} != ${expectedFacts(v)} for ${shown}`);
  if (isObject(v)) {
    if (f & SCAN.ID_INT && scanner.facts[1] !== v.id) throw new Error(`integer id differs: ${shown}`);
    if (f & SCAN.ID_STRING && line.toString('latin1', scanner.facts[2], scanner.facts[3]) !== v.id)
      throw new Error(`string id span differs: ${shown}`);
    if (f & SCAN.METHOD_STRING && line.toString('latin1', scanner.facts[4], scanner.facts[5]) !== v.method)
      throw new Error(`method span differs: ${shown}`);
    if (f & SCAN.PARAMS_OBJECT) {
      const sub = parseStrict(line.subarray(scanner.facts[6], scanner.facts[7]));
      if (stringifyAscii(sub) !== stringifyAscii(v.params!)) throw new Error(`params span differs: ${shown}`);
      const byParse = parseScanned(line, scanner.facts[6]!, scanner.facts[7]!);
      if (stringifyAscii(byParse) !== stringifyAscii(v.params!)) throw new Error(`params read otherwise: ${shown}`);
    }
    const rk = plainResponseKey(line, scanner.facts);
    if (rk !== null && !(has(v, 'id') && !has(v, 'method') && has(v, 'result') !== has(v, 'error')))
      throw new Error(`plainResponseKey for a non-response: ${shown}`);
    const rq = plainRequest(line, scanner.facts);
    if (rq !== null && (rq.method !== v.method || (rq.id === undefined) === has(v, 'id')))
      throw new Error(`plainRequest misread: ${shown}`);
  }
  return 'fast';
}

// ---- generation ----

const KEYS = ['a', 'b', 'name', 'path', 'arguments', 'x_y', 'Name', '__proto__', '0', '12', '01', 'id', 'é', 'a b'];
const STRS = [
  '',
  'ok',
  'hello world',
  'a"b',
  'a\\b',
  'tab\there',
  'nl\nx',
  'é',
  '😀',
  '\u007f',
  '\u0000',
  '\u2028',
  '/p/../q',
];

function genValue(r: () => number, depth: number): JsonValue {
  const k = r();
  if (depth > 3 || k < 0.45) {
    const s = r();
    if (s < 0.3) return STRS[Math.floor(r() * STRS.length)]!;
    if (s < 0.55) return Math.floor((r() - 0.5) * 10 ** Math.floor(r() * 17));
    if (s < 0.65) return r() < 0.5;
    if (s < 0.7) return null;
    return String.fromCharCode(...Array.from({ length: Math.floor(r() * 6) }, () => Math.floor(r() * 0x3000)));
  }
  if (k < 0.7) return Array.from({ length: Math.floor(r() * 4) }, () => genValue(r, depth + 1));
  const o: Record<string, JsonValue> = {};
  const n = Math.floor(r() * 5);
  for (let i = 0; i < n; i++) o[KEYS[Math.floor(r() * KEYS.length)]!] = genValue(r, depth + 1);
  return o;
}

function genMessage(r: () => number, id: number): JsonValue {
  const m: Record<string, JsonValue> = { jsonrpc: r() < 0.95 ? '2.0' : '2.1' };
  const kind = r();
  if (kind < 0.5) {
    if (r() < 0.8) m.id = r() < 0.7 ? id : `req-${id}`;
    m.method = r() < 0.8 ? 'tools/call' : 'notifications/cancelled';
    if (r() < 0.9) m.params = { name: 'read_file', arguments: genValue(r, 1) };
  } else {
    m.id = r() < 0.7 ? id : `s${id}`;
    if (r() < 0.7) m.result = { content: [{ type: 'text', text: genValue(r, 2) }], isError: false };
    else m.error = r() < 0.9 ? { code: -32001, message: 'denied' } : 'bad';
  }
  if (r() < 0.05) m.extra = genValue(r, 1);
  return m;
}

/** One mutation of a canonical line: most keep it valid but not canonical, some break it. */
function mutate(r: () => number, s: string): string {
  const at = Math.floor(r() * (s.length + 1));
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  switch (Math.floor(r() * 14)) {
    case 0:
      return s.slice(0, at) + ' ' + s.slice(at); // whitespace (valid between tokens only)
    case 1:
      return s.replace(/\\u([0-9a-f]{4})/, (_m, h: string) => `\\u${h.toUpperCase()}`);
    case 2:
      return s.replace(/"[a-z]/, '"\\u0061'); // an escaped ASCII letter
    case 3:
      return s.replace(/:(\d+)/, ':$1.0');
    case 4:
      return s.replace(/:(\d+)/, ':-0');
    case 5:
      return s.replace(/,"/, ',"a":1,"');
    case 6:
      return (
        s.slice(0, at) + pick(['\t', '\r', '\u0000', '\u00e9', '\ud83d', '"', '\\', '}', ']', ',', ':']) + s.slice(at)
      );
    case 7:
      return s.slice(0, at);
    case 8:
      return s.replace('/', '\\/');
    case 9:
      return s.replace(/"id":(\d+)/, '"id":1$1000000000000000');
    case 10:
      return s.replace(/"name"/, '"Name"');
    case 11:
      return s.replace(/\{/, '{"a":1,"a":1,');
    case 12:
      return s.replace(/"(\w)/, '"\\u00e9$1');
    default:
      return s;
  }
}

describe.skipIf(!nativeAvailable())('native JSON pre-check = the gate’s parser and writer', () => {
  const scanner = nativeLineScanner()!;

  it('says fast only for valid canonical lines: a fixed corpus', () => {
    const fast = [
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/a.txt"}}}',
      '{"jsonrpc":"2.0","id":"abc","result":{"content":[]}}',
      '{"jsonrpc":"2.0","id":7,"error":{"code":-32001,"message":"x"}}',
      '{"jsonrpc":"2.0","method":"notifications/initialized"}',
      '{"a":"\\u00e9\\ud83d\\ude00\\u007f\\u0001\\n\\"\\\\"}',
      '{"__proto__":1}',
      '[1,2,[],{}]',
      '-123',
      '"x"',
      'true',
      '{}',
      '{"a":' + '['.repeat(400) + ']'.repeat(400) + '}',
      `{${Array.from({ length: 40 }, (_, i) => `"k${i}":${i}`).join(',')}}`, // past the short key list
    ];
    for (const s of fast) expect([s, check(scanner, s)]).toEqual([s, 'fast']);
    const slow = [
      '{"a":1,"a":2}', // duplicate
      `{${Array.from({ length: 40 }, (_, i) => `"k${i}":${i}`).join(',')},"k3":0}`, // a duplicate among many keys
      '{"a":1,"\\u0061":2}', // escaped key (a duplicate once decoded)
      '{"b":1,"1":2}', // an index key: a JS object lists it first
      '{"a":"\\u00E9"}', // upper-case hex is re-written
      '{"a":"\\u0041"}', // an escaped printable ASCII character is re-written
      '{"a":"\\u000a"}', // \n is written short
      '{"a":"\\/"}',
      '{"a":"é"}', // raw non-ASCII is escaped by the writer
      '{"a":1.0}',
      '{"a":-0}',
      '{"a":1e5}',
      '{"a":1234567890123456}', // 16 digits: the TypeScript side decides
      '{"a": 1}',
      ' {"a":1}',
      '{"a":"\\ud800"}',
      '{"a":"\\udc00"}',
      '{"a":"x\ty"}',
      '{"a":01}',
      '{"a":1,}',
      '{"a":1}{"b":2}',
      '',
      '{"a":' + '['.repeat(600) + ']'.repeat(600) + '}',
      '{"a":"\u0000"}',
    ];
    for (const s of slow) expect([s, check(scanner, s)]).toEqual([s, 'slow']);
    // Invalid UTF-8 bytes are never fast.
    expect(check(scanner, Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]))).toBe('slow');
  });

  it('agrees on 100,000 generated lines (seed 20261130), and takes the fast path for canonical ones', () => {
    const r = rng(20261130);
    let fast = 0;
    let canonicalFast = 0;
    let canonicalTotal = 0;
    for (let i = 0; i < 100_000; i++) {
      const canonical = stringifyAscii(genMessage(r, i));
      const line = r() < 0.3 ? canonical : mutate(r, canonical);
      const v = check(scanner, line);
      if (v === 'fast') fast++;
      if (line === canonical) {
        canonicalTotal++;
        if (v === 'fast') canonicalFast++;
      }
    }
    // Canonical lines miss the fast path only for what the scanner leaves to TypeScript on purpose
    // (index keys, escaped keys, floats, long integers), which the generator makes rarely.
    expect(canonicalFast / canonicalTotal).toBeGreaterThan(0.6);
    expect(fast).toBeGreaterThan(20_000);
  });

  it('the answer reader stops at each kind of answer the gate must read: a fixed corpus', () => {
    const reader = nativeAnswerReader()!;
    const ok = '{"jsonrpc":"2.0","id":1,"result":{}}';
    const not = [
      '{"jsonrpc":"2.0","id":2,"result":{},"error":{"code":1,"message":"x"}}', // both
      '{"jsonrpc":"2.0","id":2}', // neither
      '{"jsonrpc":"2.0","id":2,"error":"bad"}', // an error that is not an object
      '{"jsonrpc":"2.0","id":"s2","result":{}}', // a string id
      '{"jsonrpc":"2.0","id":2,"result":{},"extra":1}', // another member
      '{"jsonrpc":"2.0","id":2,"method":"x","result":{}}', // a request's member
      '{"jsonrpc":"1.0","id":2,"result":{}}',
      '{"jsonrpc":"2.0", "id":2,"result":{}}', // not canonical
      '',
    ];
    for (const n of not) {
      const chunk = Buffer.from(`${ok}\n${n}\n${ok}\n`);
      expect([n, reader.read(chunk, 0)]).toEqual([n, 1]);
      expect(reader.out[0]).toBe(ok.length + 1);
    }
    // An answer holding a secret literal is taken, flagged; a line without its LF is not taken.
    expect(reader.read(Buffer.from(`${ok}\n{"jsonrpc":"2.0","id":3,"result":{"t":"AKIA"}}\n${ok}`), 0)).toBe(2);
    expect([reader.out[2], reader.out[4], reader.out[5]]).toEqual([0, 3, 1]);
  });

  it('the answer reader takes, run by run, exactly the plain answers the line-by-line path takes (200,000 lines)', () => {
    const r = rng(20261206);
    const lines: Buffer[] = [];
    for (let i = 0; i < 200_000; i++) {
      const m = genMessage(r, i);
      // Some answers hold what the secret pre-pass looks for (in any case), or something near it.
      if (isObject(m) && isObject(m.result) && r() < 0.3) {
        const lit = ANSWER_LITERALS[Math.floor(r() * ANSWER_LITERALS.length)]!;
        const text = r() < 0.5 ? lit.toUpperCase() : r() < 0.5 ? lit.slice(0, -1) : `x${lit}y`;
        m.result = { content: [{ type: 'text', text }] };
      }
      const canonical = stringifyAscii(m);
      lines.push(Buffer.from(r() < 0.6 ? canonical : mutate(r, canonical), 'utf8'));
    }
    const reader = nativeAnswerReader()!;
    const out = reader.out;
    let secrets = 0;
    const walked = walkChunks(
      7,
      lines,
      {
        read: reader.read,
        end: (k) => out[3 * k]!,
        answer: (k) => [out[3 * k + 1], out[3 * k + 2]],
        max: CHUNK_LINES,
      },
      (line) => {
        if (!scanner.scan(line)) return null;
        const key = plainResponseKey(line, scanner.facts);
        if (key === null || !key.startsWith('n')) return null;
        const secret = lineMayHoldSecretJs(line) ? 1 : 0;
        secrets += secret;
        return [Number(key.slice(1)), secret];
      },
    );
    expect(walked.taken).toBeGreaterThan(40_000);
    expect(walked.runs).toBeGreaterThan(5_000);
    expect(secrets).toBeGreaterThan(5_000);
  });
});
