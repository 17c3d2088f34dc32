/**
 * A strict JSON reader and a canonical writer for the MCP gate.
 *
 * Why not JSON.parse: two parsers reading the same bytes differently is how a filter is bypassed.
 * JSON.parse keeps the last of two duplicate keys, accepts lone surrogates, turns 1e400 into
 * Infinity-then-null on the way out and rounds 2^53+1 silently. The gate refuses every such
 * message and forwards only what it re-wrote itself (compact, pure ASCII), so what it checked is
 * exactly what the other side parses.
 */
import { CatalogueError, type JsonProblem } from '../errors.js';

/** A number the gate must carry without a JS double losing it: a float literal or a big integer. */
export class JsonNumber {
  constructor(
    /** 'float' for a literal with a fraction or exponent, 'bigint' for an integer beyond 2^53. */
    readonly kind: 'float' | 'bigint',
    /** Canonical text written on the wire (floats always carry a '.' or an exponent). */
    readonly text: string,
    /** The nearest double (for comparisons; `text` is what is forwarded). */
    readonly value: number,
  ) {}
}

export type JsonValue = null | boolean | number | string | JsonNumber | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

/** Why a line was refused: the catalogue's JSON_PROBLEMS (src/errors.ts, docs/errors.md). */
export type JsonErrorCode = JsonProblem;

export class JsonError extends CatalogueError<JsonProblem> {
  constructor(
    code: JsonProblem,
    readonly offset: number,
  ) {
    super(code, `${code} at byte ${offset}`);
  }
}

/** Integers longer than this are refused (CPython's limit; beyond it no peer reads them alike). */
export const MAX_INT_DIGITS = 4300;
/** Nesting beyond this is an attack on the reader's stack, not a message. */
export const MAX_DEPTH = 512;

const Q = 0x22;
const BS = 0x5c;

/** Returns true when `o` is a parsed JSON object (not an array, not a JsonNumber). */
export function isObject(v: JsonValue | undefined): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof JsonNumber);
}

/** The JSON type of a parsed value, as typed argument rules name it. */
export function jsonType(v: JsonValue): 'string' | 'number' | 'boolean' | 'null' | 'object' | 'array' {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (v instanceof JsonNumber) return 'number';
  const t = typeof v;
  if (t === 'object') return 'object';
  return t as 'string' | 'number' | 'boolean';
}

class Reader {
  i = 0;
  /** The whole line as latin1 (one byte, one char): ASCII segments are cut from it as substrings,
   * which is far cheaper than a Buffer decode per string. Non-ASCII segments are decoded as UTF-8. */
  readonly s: string;
  constructor(
    readonly b: Buffer,
    readonly fileWs = false,
  ) {
    this.s = b.toString('latin1');
  }

  fail(code: JsonErrorCode, at = this.i): never {
    throw new JsonError(code, at);
  }

  ws(): void {
    const b = this.b;
    // Only the space: a raw TAB, CR or other control byte anywhere in a line is refused, because a
    // reader that splits lines on a bare CR would see two messages where the gate saw one.
    if (this.fileWs) {
      for (let c = b[this.i]; c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09; c = b[++this.i]);
      return;
    }
    while (this.i < b.length && b[this.i] === 0x20) this.i++;
  }

  value(depth: number): JsonValue {
    this.ws();
    const c = this.b[this.i];
    if (c === undefined) this.fail('syntax');
    if (c === Q) return this.string();
    if (c === 0x7b) return this.object(depth + 1);
    if (c === 0x5b) return this.array(depth + 1);
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.number();
    if (c === 0x74) return this.literal('true', true);
    if (c === 0x66) return this.literal('false', false);
    if (c === 0x6e) return this.literal('null', null);
    if (c < 0x20) this.fail('control_char');
    return this.fail('syntax');
  }

  literal<T>(word: string, v: T): T {
    for (let k = 0; k < word.length; k++) {
      if (this.b[this.i + k] !== word.charCodeAt(k)) this.fail('syntax', this.i + k);
    }
    this.i += word.length;
    return v;
  }

  object(depth: number): JsonObject {
    if (depth > MAX_DEPTH) this.fail('too_deep');
    this.i++;
    // A plain object (fast properties); `__proto__` is defined as an own property below, so a
    // key never reaches the prototype, and every lookup elsewhere goes through hasOwnProperty.
    const o: JsonObject = {};
    this.ws();
    if (this.b[this.i] === 0x7d) {
      this.i++;
      return o;
    }
    for (;;) {
      this.ws();
      if (this.b[this.i] !== Q)
        this.fail(this.b[this.i] !== undefined && this.b[this.i]! < 0x20 ? 'control_char' : 'syntax');
      const at = this.i;
      const k = this.string();
      if (Object.prototype.hasOwnProperty.call(o, k)) this.fail('duplicate_key', at);
      this.ws();
      if (this.b[this.i] !== 0x3a) this.fail('syntax');
      this.i++;
      const v = this.value(depth);
      if (k === '__proto__')
        Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
      else o[k] = v;
      this.ws();
      const c = this.b[this.i];
      if (c === 0x2c) {
        this.i++;
        continue;
      }
      if (c === 0x7d) {
        this.i++;
        return o;
      }
      this.fail(c !== undefined && c < 0x20 ? 'control_char' : 'syntax');
    }
  }

  array(depth: number): JsonValue[] {
    if (depth > MAX_DEPTH) this.fail('too_deep');
    this.i++;
    const a: JsonValue[] = [];
    this.ws();
    if (this.b[this.i] === 0x5d) {
      this.i++;
      return a;
    }
    for (;;) {
      a.push(this.value(depth));
      this.ws();
      const c = this.b[this.i];
      if (c === 0x2c) {
        this.i++;
        continue;
      }
      if (c === 0x5d) {
        this.i++;
        return a;
      }
      this.fail(c !== undefined && c < 0x20 ? 'control_char' : 'syntax');
    }
  }

  number(): number | JsonNumber {
    const b = this.b;
    const start = this.i;
    if (b[this.i] === 0x2d) this.i++;
    const intStart = this.i;
    if (b[this.i] === 0x30) this.i++;
    else if (b[this.i]! >= 0x31 && b[this.i]! <= 0x39) while (b[this.i]! >= 0x30 && b[this.i]! <= 0x39) this.i++;
    else this.fail('syntax');
    const intDigits = this.i - intStart;
    const c = b[this.i];
    // Fast path: a short integer (ids, counts) is built from its digits without a string.
    if (intDigits <= 15 && c !== 0x2e && c !== 0x65 && c !== 0x45) {
      let n = 0;
      for (let k = intStart; k < this.i; k++) n = n * 10 + (b[k]! - 0x30);
      return b[start] === 0x2d && n !== 0 ? -n : n;
    }
    let float = false;
    if (b[this.i] === 0x2e) {
      float = true;
      this.i++;
      const f = this.i;
      while (b[this.i]! >= 0x30 && b[this.i]! <= 0x39) this.i++;
      if (this.i === f) this.fail('syntax');
    }
    if (b[this.i] === 0x65 || b[this.i] === 0x45) {
      float = true;
      this.i++;
      if (b[this.i] === 0x2b || b[this.i] === 0x2d) this.i++;
      const e = this.i;
      while (b[this.i]! >= 0x30 && b[this.i]! <= 0x39) this.i++;
      if (this.i === e) this.fail('syntax');
    }
    const text = this.s.slice(start, this.i);
    if (!float) {
      if (intDigits > MAX_INT_DIGITS) this.fail('number_too_long', start);
      const n = Number(text);
      if (Number.isSafeInteger(n)) return n === 0 ? 0 : n;
      return new JsonNumber('bigint', text, n);
    }
    if (text.length > MAX_INT_DIGITS + 400) this.fail('number_too_long', start);
    const n = Number(text);
    if (!Number.isFinite(n)) this.fail('bad_number', start);
    return new JsonNumber('float', floatText(n), n);
  }

  string(): string {
    const b = this.b;
    this.i++;
    let out = '';
    let seg = this.i;
    // Pure-ASCII segments decode as latin1, which is cheaper than the UTF-8 decoder.
    let ascii = true;
    for (;;) {
      const c = b[this.i];
      if (c === undefined) this.fail('syntax');
      if (c === Q) {
        if (seg < this.i) out += ascii ? this.s.slice(seg, this.i) : b.toString('utf8', seg, this.i);
        this.i++;
        return out;
      }
      if (c < 0x20) this.fail('control_char');
      if (c === BS) {
        if (seg < this.i) out += ascii ? this.s.slice(seg, this.i) : b.toString('utf8', seg, this.i);
        out += this.escape();
        seg = this.i;
        ascii = true;
        continue;
      }
      if (c < 0x80) {
        this.i++;
        continue;
      }
      ascii = false;
      this.utf8(c);
    }
  }

  /** Validates one multi-byte UTF-8 sequence (no overlongs, no surrogates, nothing past U+10FFFF). */
  utf8(c: number): void {
    const b = this.b;
    const at = this.i;
    let n: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 1;
    else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c === 0xe0) lo = 0xa0;
      if (c === 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c === 0xf0) lo = 0x90;
      if (c === 0xf4) hi = 0x8f;
    } else return this.fail('invalid_utf8', at);
    const c1 = b[at + 1];
    if (c1 === undefined || c1 < lo || c1 > hi) this.fail('invalid_utf8', at);
    for (let k = 2; k <= n; k++) {
      const ck = b[at + k];
      if (ck === undefined || ck < 0x80 || ck > 0xbf) this.fail('invalid_utf8', at);
    }
    this.i = at + n + 1;
  }

  hex4(): number {
    let v = 0;
    for (let k = 0; k < 4; k++) {
      const c = this.b[this.i++];
      let d: number;
      if (c === undefined) return this.fail('syntax');
      if (c >= 0x30 && c <= 0x39) d = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) d = c - 0x57;
      else if (c >= 0x41 && c <= 0x46) d = c - 0x37;
      else return this.fail('syntax', this.i - 1);
      v = v * 16 + d;
    }
    return v;
  }

  escape(): string {
    const at = this.i;
    this.i++;
    const c = this.b[this.i++];
    switch (c) {
      case Q:
        return '"';
      case BS:
        return '\\';
      case 0x2f:
        return '/';
      case 0x62:
        return '\b';
      case 0x66:
        return '\f';
      case 0x6e:
        return '\n';
      case 0x72:
        return '\r';
      case 0x74:
        return '\t';
      case 0x75: {
        const u = this.hex4();
        if (u >= 0xd800 && u <= 0xdbff) {
          // A high surrogate must be followed by an escaped low one; a lone half is refused because
          // readers disagree on it (replacement character, error, or kept as is).
          if (this.b[this.i] !== BS || this.b[this.i + 1] !== 0x75) this.fail('lone_surrogate', at);
          this.i += 2;
          const l = this.hex4();
          if (l < 0xdc00 || l > 0xdfff) this.fail('lone_surrogate', at);
          return String.fromCharCode(u, l);
        }
        if (u >= 0xdc00 && u <= 0xdfff) this.fail('lone_surrogate', at);
        return String.fromCharCode(u);
      }
      default:
        return this.fail(c !== undefined && c < 0x20 ? 'control_char' : 'syntax', at);
    }
  }
}

/**
 * Parses one JSON text from a Buffer (the bytes of one line, without its LF), strictly.
 * Throws JsonError with a machine-readable code on anything that is not one clean JSON value.
 * `fileWhitespace` admits TAB/CR/LF between tokens (a file an operator wrote, never the wire).
 */
export function parseStrict(buf: Buffer, opts?: { fileWhitespace?: boolean }): JsonValue {
  const r = new Reader(buf, opts?.fileWhitespace === true);
  r.ws();
  if (r.i >= buf.length) r.fail('empty');
  const v = r.value(0);
  r.ws();
  if (r.i < buf.length) r.fail(buf[r.i]! < 0x20 ? 'control_char' : 'syntax');
  return v;
}

/** The text a float is written as: the shortest round-trip form, always marked as a float. */
export function floatText(n: number): string {
  if (Object.is(n, -0)) return '-0.0';
  const s = String(n);
  return /[.e]/.test(s) ? s : `${s}.0`;
}

const SAFE = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

function quote(s: string): string {
  if (SAFE.test(s)) return `"${s}"`;
  let out = '"';
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += '\\\\';
    else if (c >= 0x20 && c < 0x7f) out += s[k];
    else if (c === 0x0a) out += '\\n';
    else if (c === 0x0d) out += '\\r';
    else if (c === 0x09) out += '\\t';
    else if (c === 0x08) out += '\\b';
    else if (c === 0x0c) out += '\\f';
    else out += `\\u${c.toString(16).padStart(4, '0')}`;
  }
  return out + '"';
}

/**
 * Writes a parsed value as compact, pure-ASCII JSON: every non-ASCII character (and DEL) is an
 * escape, no whitespace, numbers as the gate read them. The output never contains a raw LF, so it
 * is always exactly one line.
 */
export function stringifyAscii(v: JsonValue): string {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'string':
      return quote(v);
    case 'number':
      // Parsed integers are safe integers; anything else reaching here came from the gate itself.
      return Number.isFinite(v) ? String(v) : 'null';
    case 'boolean':
      return v ? 'true' : 'false';
  }
  if (v instanceof JsonNumber) return v.text;
  if (Array.isArray(v)) {
    let out = '[';
    for (let k = 0; k < v.length; k++) {
      if (k) out += ',';
      out += stringifyAscii(v[k]!);
    }
    return out + ']';
  }
  let out = '{';
  let first = true;
  for (const k in v) {
    const x = v[k];
    if (x === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += quote(k) + ':' + stringifyAscii(x);
  }
  return out + '}';
}

/** A key that identifies a JSON-RPC id exactly by type: 1, "1" and 1.0 are three ids. */
export function idKey(id: JsonValue): string | null {
  if (typeof id === 'string') return `s${id}`;
  if (typeof id === 'number') return `n${id}`;
  if (id instanceof JsonNumber) return `${id.kind === 'float' ? 'f' : 'n'}${id.text}`;
  return null;
}

/** Converts a plain JS value (from JSON.parse or code) into the gate's JSON model; floats stay floats. */
export function fromPlain(v: unknown): JsonValue {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return v;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new TypeError('non-finite number');
    return Number.isInteger(v) && Number.isSafeInteger(v) ? v : new JsonNumber('float', floatText(v), v);
  }
  if (v instanceof JsonNumber) return v;
  if (Array.isArray(v)) return v.map(fromPlain);
  if (typeof v === 'object') {
    const o: JsonObject = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
      if (x === undefined) continue;
      if (k === '__proto__')
        Object.defineProperty(o, k, { value: fromPlain(x), enumerable: true, writable: true, configurable: true });
      else o[k] = fromPlain(x);
    }
    return o;
  }
  throw new TypeError(`not JSON: ${typeof v}`);
}

/** True when a value holds a JsonNumber anywhere (only then does it differ from its plain form). */
function hasJsonNumber(v: JsonValue, depth: number): boolean {
  if (v instanceof JsonNumber) return true;
  // Past any depth the parser admits: let toPlain copy it rather than recurse further here.
  if (depth > 300) return true;
  if (Array.isArray(v)) {
    for (let k = 0; k < v.length; k++) if (hasJsonNumber(v[k]!, depth + 1)) return true;
    return false;
  }
  if (isObject(v)) {
    for (const k in v) if (hasJsonNumber(v[k]!, depth + 1)) return true;
  }
  return false;
}

/**
 * The plain JS form of a value for read-only use: the value itself when it holds no JsonNumber
 * (parsed objects, arrays and strings already are plain JS), else a copy made by toPlain. Saves
 * a deep copy per tool call; callers must not modify the result.
 */
export function asPlain(v: JsonValue): unknown {
  return hasJsonNumber(v, 0) ? toPlain(v) : v;
}

/** Converts the gate's JSON model to plain JS values (JsonNumber → its double). */
export function toPlain(v: JsonValue): unknown {
  if (v instanceof JsonNumber) return v.value;
  if (Array.isArray(v)) return v.map(toPlain);
  if (isObject(v)) {
    const o: Record<string, unknown> = {};
    for (const k in v) {
      if (k === '__proto__') Object.defineProperty(o, k, { value: toPlain(v[k]!), enumerable: true, writable: true });
      else o[k] = toPlain(v[k]!);
    }
    return o;
  }
  return v;
}
