import { describe, expect, it } from 'vitest';
import { idKey, JsonError, JsonNumber, parseStrict, stringifyAscii } from '../../../src/formats/json.js';

const p = (s: string | Buffer) => parseStrict(typeof s === 'string' ? Buffer.from(s, 'utf8') : s);
const code = (s: string | Buffer): string => {
  try {
    p(s);
    return 'ok';
  } catch (e) {
    if (e instanceof JsonError) return e.code;
    throw e;
  }
};

describe('strict JSON reader', () => {
  it.each(
    [
      ['{"a":1}', 'ok'],
      ['  {"a" : [1, 2 ,3]} ', 'ok'],
      ['{"a":"\\u00e9\\ud83d\\ude00"}', 'ok'],
      ['{"a":1,"a":2}', 'duplicate_key'],
      ['{"x":{"b":1,"b":1}}', 'duplicate_key'],
      ['[{"k":{"z":[{"q":1,"q":1}]}}]', 'duplicate_key'],
      ['{"a":1,"\\u0061":2}', 'duplicate_key'],
      ['{"a":"x\ty"}', 'control_char'],
      ['{"a":"x\ry"}', 'control_char'],
      ['{"a":"x\u0000y"}', 'control_char'],
      ['{"a":\t1}', 'control_char'],
      ['{"a":1}\r', 'control_char'],
      ['\t{"a":1}', 'control_char'],
      ['{"a":NaN}', 'syntax'],
      ['{"a":Infinity}', 'syntax'],
      ['{"a":-Infinity}', 'syntax'],
      ['{"a":1e400}', 'bad_number'],
      ['{"a":-1e999}', 'bad_number'],
      ['{"a":1' + '0'.repeat(4300) + '}', 'number_too_long'],
      ['{"a":' + '9'.repeat(4300) + '}', 'ok'],
      ['{"a":01}', 'syntax'],
      ['{"a":1.}', 'syntax'],
      ['{"a":.5}', 'syntax'],
      ['{"a":+1}', 'syntax'],
      ['{"a":"\\ud800"}', 'lone_surrogate'],
      ['{"a":"\\udc00x"}', 'lone_surrogate'],
      ['{"a":"\\ud800\\u0041"}', 'lone_surrogate'],
      ['{"a":"\\x41"}', 'syntax'],
      ['{"a":1,}', 'syntax'],
      ['[1,]', 'syntax'],
      ["{'a':1}", 'syntax'],
      ['{"a":1}{"b":2}', 'syntax'],
      ['', 'empty'],
      ['   ', 'empty'],
      ['['.repeat(100000), 'too_deep'],
      ['{"a":'.repeat(100000), 'too_deep'],
      ['true', 'ok'],
      ['"\u2028"', 'ok'],
    ].map(([i, e]) => [i!.length > 60 ? `${i!.slice(0, 60)}…` : i!, i!, e!]),
  )('%s → %s', (_title, input, expected) => {
    expect(code(input)).toBe(expected);
  });

  it.each([
    ['overlong 2-byte', [0xc0, 0xaf]],
    ['overlong 3-byte', [0xe0, 0x80, 0xaf]],
    ['encoded surrogate', [0xed, 0xa0, 0x80]],
    ['beyond U+10FFFF', [0xf4, 0x90, 0x80, 0x80]],
    ['lone continuation', [0x80]],
    ['truncated', [0xe2, 0x82]],
    ['0xff', [0xff]],
  ])('refuses invalid UTF-8 in a string: %s', (_n, bytes) => {
    const b = Buffer.concat([Buffer.from('{"a":"x'), Buffer.from(bytes), Buffer.from('y"}')]);
    expect(code(b)).toBe('invalid_utf8');
  });

  it('refuses a BOM before the value', () => {
    expect(code(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{}')]))).toBe('syntax');
  });

  it('keeps the last-wins trap out: __proto__ is an ordinary key', () => {
    const v = p('{"__proto__":{"x":1},"y":2}') as Record<string, unknown>;
    expect(Object.keys(v)).toEqual(['__proto__', 'y']);
    expect(stringifyAscii(v as never)).toBe('{"__proto__":{"x":1},"y":2}');
  });
});

describe('canonical writer', () => {
  it.each([
    ['{ "a" : 1 , "b":[ true,false,null ] }', '{"a":1,"b":[true,false,null]}'],
    ['{"s":"é😀\u2028"}', '{"s":"\\u00e9\\ud83d\\ude00\\u2028"}'],
    ['{"s":"\\u007f\\n\\t\\"\\\\/"}', '{"s":"\\u007f\\n\\t\\"\\\\/"}'],
    ['1.0', '1.0'],
    ['1E2', '100.0'],
    ['-0', '0'],
    ['-0.0', '-0.0'],
    ['1.5e300', '1.5e+300'],
    ['9007199254740993', '9007199254740993'],
    ['-123456789012345678901234567890', '-123456789012345678901234567890'],
    ['0.1', '0.1'],
    ['[]', '[]'],
    ['{}', '{}'],
  ])('%s → %s', (input, out) => {
    expect(stringifyAscii(p(input))).toBe(out);
  });

  it('writes only printable ASCII, on one line', () => {
    const out = stringifyAscii(p('{"a":"\\u0000\\r\\n\\u2029 ü \\ud83d\\ude00"}'));
    expect(out).toMatch(/^[\x20-\x7e]+$/);
  });

  it('keeps big integers exact and marks floats', () => {
    expect(p('9007199254740993')).toBeInstanceOf(JsonNumber);
    expect((p('9007199254740993') as JsonNumber).kind).toBe('bigint');
    expect((p('2.5') as JsonNumber).kind).toBe('float');
    expect(p('42')).toBe(42);
  });
});

describe('id keys', () => {
  it('tells 1, "1" and 1.0 apart', () => {
    const keys = [p('1'), p('"1"'), p('1.0')].map((v) => idKey(v));
    expect(new Set(keys).size).toBe(3);
    expect(idKey(p('1'))).toBe(idKey(p('1')));
  });
  it('has no key for null, booleans, objects', () => {
    expect(idKey(null)).toBeNull();
    expect(idKey(true)).toBeNull();
    expect(idKey(p('{}'))).toBeNull();
  });
});
