import { describe, expect, it } from 'vitest';
import { LineReader } from '../../../src/formats/lines.js';

function reader(maxBytes: number) {
  const got: (string | null)[] = [];
  const r = new LineReader(
    (l) => got.push(l.toString('latin1')),
    () => got.push(null),
    { maxBytes },
  );
  return { r, got };
}

describe('LineReader (the one JSON-lines reader)', () => {
  it('splits on LF across chunks and hands the final line without a LF at end()', () => {
    const { r, got } = reader(100);
    r.push('ab');
    r.push('c\nde\n\nf');
    expect(got).toEqual(['abc', 'de', '']);
    r.end();
    expect(got).toEqual(['abc', 'de', '', 'f']);
  });

  it('refuses a line over the limit once, whether it arrives whole or in pieces, and skips it to its LF', () => {
    const { r, got } = reader(4);
    r.push('12345\nok\n');
    r.push('123');
    r.push('45678');
    r.push('9\nnext\n');
    r.end();
    expect(got).toEqual([null, 'ok', null, 'next']);
  });

  it('finishLine reads a chunk up to the end of the line held and returns the rest; pushOne reads one line', () => {
    const { r, got } = reader(4);
    // Nothing held: the whole chunk comes back, nothing is read.
    expect(r.finishLine(Buffer.from('ab\ncd')).toString()).toBe('ab\ncd');
    expect(got).toEqual([]);
    r.push('ab');
    expect(r.idle).toBe(false);
    expect(r.finishLine(Buffer.from('c')).toString()).toBe('');
    expect(r.finishLine(Buffer.from('\n{}\nx')).toString()).toBe('{}\nx');
    expect(got).toEqual(['abc']);
    expect(r.idle).toBe(true);
    // Held while skipping an over-long line: the rest of it is dropped, not handed on as a line.
    r.push('123456');
    expect(r.idle).toBe(false);
    expect(r.finishLine(Buffer.from('78\nok\n')).toString()).toBe('ok\n');
    expect(got).toEqual(['abc', null]);
    const c = Buffer.from('one\ntwo\nthr');
    let at = r.pushOne(c, 0);
    expect(at).toBe(4);
    at = r.pushOne(c, at);
    expect(r.pushOne(c, at)).toBe(c.length);
    expect(got).toEqual(['abc', null, 'one', 'two']);
    expect(r.idle).toBe(false);
  });

  it('admits a line of exactly the limit', () => {
    const { r, got } = reader(4);
    r.push('12');
    r.push('34\n');
    expect(got).toEqual(['1234']);
  });

  it('passes bytes undecoded (invalid UTF-8 reaches the strict parser as it was sent)', () => {
    const got: Buffer[] = [];
    const r = new LineReader(
      (l) => got.push(Buffer.from(l)),
      () => undefined,
      { maxBytes: 10 },
    );
    r.push(Buffer.from([0xff, 0xfe, 0x0a]));
    expect(got[0]).toEqual(Buffer.from([0xff, 0xfe]));
  });
});
