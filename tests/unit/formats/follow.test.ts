import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { followLines, tailLines, type FollowLinesOptions } from '../../../src/formats/follow.js';

function tmpFile(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-follow-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'd.jsonl');
}

/** A follower that only reads when the test says so (poll), never on its own timer or inotify. */
function follower(file: string, extra: Partial<FollowLinesOptions> = {}) {
  const got: string[] = [];
  let oversize = 0;
  const f = followLines({
    path: file,
    onLine: (l) => got.push(l),
    onOversize: () => oversize++,
    pollMs: 1_000_000,
    watch: false,
    ...extra,
  });
  onTestFinished(() => f.close());
  return { f, got, oversize: () => oversize };
}

describe('followLines', () => {
  it('reads a rename-style rotation: the old file to its end, then the new one from its start', () => {
    const p = tmpFile();
    fs.writeFileSync(p, '{"n":1}\n');
    const { f, got } = follower(p);
    expect(got).toEqual(['{"n":1}']);
    fs.renameSync(p, `${p}.1`);
    // Written to the old file after the rename (a writer that has not reopened yet): not lost.
    fs.appendFileSync(`${p}.1`, '{"n":2}\n');
    f.poll(); // the path is gone for now: still reading the old file
    expect(got).toEqual(['{"n":1}', '{"n":2}']);
    fs.appendFileSync(`${p}.1`, '{"n":3}\n');
    fs.writeFileSync(p, '{"n":4}\n{"n":5}\n');
    f.poll();
    expect(got).toEqual(['{"n":1}', '{"n":2}', '{"n":3}', '{"n":4}', '{"n":5}']);
    expect(f.rotations()).toBe(1);
    fs.appendFileSync(p, '{"n":6}\n');
    f.poll();
    expect(got.at(-1)).toBe('{"n":6}');
    expect(got).toHaveLength(6);
  });

  it('reads a copytruncate from 0: the same inode, cut and written again', () => {
    const p = tmpFile();
    fs.writeFileSync(p, '{"n":1}\n{"n":2}\n');
    const { f, got } = follower(p);
    const ino = fs.statSync(p).ino;
    fs.truncateSync(p, 0);
    fs.appendFileSync(p, '{"n":3}\n');
    f.poll();
    expect(fs.statSync(p).ino).toBe(ino);
    expect(got).toEqual(['{"n":1}', '{"n":2}', '{"n":3}']);
    expect(f.rotations()).toBe(0);
  });

  it('holds a partial last line until it is completed, a character cut between two writes kept whole', () => {
    const p = tmpFile();
    const line = Buffer.from('{"reason":"✓ done"}');
    const cut = line.indexOf(Buffer.from('✓')) + 1; // inside the three bytes of ✓
    fs.writeFileSync(p, Buffer.concat([Buffer.from('{"n":1}\n'), line.subarray(0, cut)]));
    const { f, got } = follower(p);
    expect(got).toEqual(['{"n":1}']);
    f.poll();
    expect(got).toEqual(['{"n":1}']);
    fs.appendFileSync(p, Buffer.concat([line.subarray(cut), Buffer.from('\n')]));
    f.poll();
    expect(got).toEqual(['{"n":1}', '{"reason":"✓ done"}']);
  });

  it('waits for a file that does not exist yet and reads it from its start', () => {
    const p = tmpFile();
    const { f, got } = follower(p);
    f.poll();
    expect(got).toEqual([]);
    fs.writeFileSync(p, '{"n":1}\n{"n":2}\n');
    f.poll();
    expect(got).toEqual(['{"n":1}', '{"n":2}']);
  });

  it('starts where tailLines ended, and reads a file rotated in since from its start', () => {
    const p = tmpFile();
    fs.writeFileSync(p, '{"n":1}\n{"n":2}\n{"n":3');
    const t = tailLines(p, 1);
    expect(t.lines).toEqual(['{"n":2}']);
    fs.appendFileSync(p, '}\n');
    const a = follower(p, { from: t });
    expect(a.got).toEqual(['{"n":3}']); // the partial line once, whole
    fs.renameSync(p, `${p}.1`);
    fs.writeFileSync(p, '{"n":9}\n');
    const b = follower(p, { from: t });
    expect(b.got).toEqual(['{"n":9}']);
  });

  it('skips a line over maxLine and counts it, and reads on after it', () => {
    const p = tmpFile();
    fs.writeFileSync(p, `{"n":1}\n"${'x'.repeat(100)}"\n{"n":2}\n`);
    const { got, oversize } = follower(p, { maxLine: 50 });
    expect(got).toEqual(['{"n":1}', '{"n":2}']);
    expect(oversize()).toBe(1);
  });

  it('wakes on inotify without waiting for its poll timer', async () => {
    const p = tmpFile();
    fs.writeFileSync(p, '');
    const { got } = follower(p, { watch: true });
    fs.appendFileSync(p, '{"n":1}\n');
    for (let i = 0; i < 100 && got.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(got).toEqual(['{"n":1}']);
  });
});

describe('tailLines with a byte budget', () => {
  it('reads no more than maxBytes and drops the line cut at its start', () => {
    const p = tmpFile();
    const lines = Array.from({ length: 100 }, (_, i) => `{"n":${String(i).padStart(3, '0')}}`); // 9 bytes + LF
    fs.writeFileSync(p, lines.join('\n') + '\n');
    const t = tailLines(p, Infinity, 10 * 10 + 5);
    expect(t.lines).toEqual(lines.slice(-10));
    expect(t.end).toBe(fs.statSync(p).size);
  });
});
