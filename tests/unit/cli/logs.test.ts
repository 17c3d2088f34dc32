import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { tailMatching } from '../../../src/cli/logs.js';
import { tailLines } from '../../../src/formats/follow.js';
import { parseLogFilter } from '../../../src/log/filter.js';

function file(content: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-tail-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  const f = path.join(dir, 'd.jsonl');
  fs.writeFileSync(f, content);
  return f;
}

describe('tailLines', () => {
  it('returns the last N lines of a file larger than one read block', () => {
    const lines = Array.from({ length: 20_000 }, (_, i) => `{"n":${i},"pad":"${'x'.repeat(20)}"}`);
    const t = tailLines(file(lines.join('\n') + '\n'), 3);
    expect(t.lines).toEqual(lines.slice(-3));
    expect(t.partial).toBe('');
  });

  it.each([
    ['a\nb\nc\n', 10, ['a', 'b', 'c'], ''],
    ['a\nb\nc\n', 0, [], ''],
    ['', 5, [], ''],
    ['a\nb\npart', 1, ['b'], 'part'],
  ])('%j tail %i', (content, n, lines, partial) => {
    const f = file(content);
    const t = tailLines(f, n);
    expect(t.lines).toEqual(lines);
    expect(t.partial).toBe(partial);
    expect(t.end).toBe(Buffer.byteLength(content) - Buffer.byteLength(partial));
  });

  it('keeps multi-byte characters whole across block boundaries', () => {
    const line = '✓'.repeat(40_000);
    expect(tailLines(file(`${line}\n${line}\n`), 1).lines).toEqual([line]);
  });
});

describe('tailMatching', () => {
  const line = (i: number, action: string, uid: number, surface = 'filesystem', ts = '2026-12-06T05:00:00.000Z') =>
    JSON.stringify({ ts, ref: `r${i}`, uid, surface, action, reason: 'x', subject: { path: `/p/${i}` } });

  it('finds the last N blocks of one subject in a log of allows larger than a read block', () => {
    const lines: string[] = [];
    for (let i = 0; i < 30_000; i++) lines.push(line(i, i % 5000 === 7 ? 'block' : 'allow', i % 3 === 1 ? 1001 : 1002));
    const f = file(lines.join('\n') + '\n' + line(99_999, 'block', 1001).slice(0, 20));
    const want = lines.filter((l) => l.includes('"action":"block"') && l.includes('"uid":1001,'));
    expect(want.length).toBeGreaterThan(1);
    const filter = parseLogFilter({ action: 'block', subject: '1001' }, () => null);
    const t = tailMatching(f, Infinity, filter);
    expect(t.lines).toEqual(want);
    expect(tailMatching(f, 1, filter).lines).toEqual(want.slice(-1));
    // The partial last line is a follower's, not printed.
    expect(t.end).toBe(Buffer.byteLength(lines.join('\n') + '\n'));
  });

  it('stops at --since', () => {
    const f = file(
      [
        line(1, 'block', 1001, 'network', '2026-12-06T04:00:00.000Z'),
        line(2, 'block', 1001, 'network', '2026-12-06T05:10:00.000Z'),
        line(3, 'ask', 1001, 'tools', '2026-12-06T05:15:00.000Z'),
      ].join('\n') + '\n',
    );
    const now = Date.parse('2026-12-06T05:20:00Z');
    const f10 = parseLogFilter({ since: '15m' }, () => null, now);
    expect(tailMatching(f, Infinity, f10).lines.map((l) => JSON.parse(l).ref)).toEqual(['r2', 'r3']);
    const asks = parseLogFilter({ action: 'block,ask', surface: 'tools' }, () => null, now);
    expect(tailMatching(f, Infinity, asks).lines.map((l) => JSON.parse(l).ref)).toEqual(['r3']);
  });
});

describe('parseLogFilter', () => {
  it.each([
    [{ action: 'blocked' }],
    [{ action: 'block,' }],
    [{ surface: 'disk' }],
    [{ since: 'yesterday' }],
    [{ since: '10 m' }],
    [{ subject: 'leash-nobody-l42' }],
  ])('refuses %j with log_filter_invalid', (o) => {
    expect(() => parseLogFilter(o, () => null)).toThrow(expect.objectContaining({ code: 'log_filter_invalid' }));
  });

  it('reads a subject by account name, and durations and timestamps for --since', () => {
    const now = Date.parse('2026-12-06T05:20:00Z');
    const f = parseLogFilter({ subject: 'leash-a', since: '2h' }, (n) => (n === 'leash-a' ? 1234 : null), now);
    expect(f.uid).toBe(1234);
    expect(f.since).toBe(now - 2 * 3_600_000);
    expect(parseLogFilter({ since: '2026-12-06T05:00:00Z' }, () => null).since).toBe(
      Date.parse('2026-12-06T05:00:00Z'),
    );
  });
});
