import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { tailLines } from '../../../src/cli/logs.js';

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
