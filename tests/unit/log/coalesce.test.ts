import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createDecisionLog, formatDecisionTail } from '../../../src/log/decisions.js';

const lines = (f: string) =>
  fs
    .readFileSync(f, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { ref: string; action: string; reason: string });

function logFile(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-logc-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'decisions.jsonl');
}

const allow = { uid: 1, surface: 'tools' as const, action: 'allow' as const, reason: 'allow_entry', subject: {} };
const block = { uid: 1, surface: 'tools' as const, action: 'block' as const, reason: 'deny_entry', subject: {} };

describe('decision log with coalesceAllows (the MCP gate)', () => {
  it('holds allow lines to the end of the event-loop turn and writes them in one go', async () => {
    const file = logFile();
    const log = createDecisionLog({ sink: file, coalesceAllows: true });
    onTestFinished(() => log.close());
    const a = log.write(allow);
    const b = log.write(allow);
    expect(fs.readFileSync(file, 'utf8')).toBe('');
    await new Promise((r) => setImmediate(r));
    expect(lines(file).map((l) => l.ref)).toEqual([a, b]);
  });

  it('writes lines formatted elsewhere at once, after the allow lines held before them', () => {
    const file = logFile();
    const log = createDecisionLog({ sink: file, coalesceAllows: true });
    onTestFinished(() => log.close());
    const a = log.write(allow);
    log.writeLines(Buffer.from('{"ref":"native01","action":"block","reason":"deny_entry"}\n'));
    expect(lines(file).map((l) => l.ref)).toEqual([a, 'native01']);
  });

  it('writes a block at once, after the allow lines held before it (decision order kept)', () => {
    const file = logFile();
    const log = createDecisionLog({ sink: file, coalesceAllows: true });
    onTestFinished(() => log.close());
    const a = log.write(allow);
    const b = log.write(block);
    // Synchronously, before any turn ends: the block is in the file, the earlier allow before it.
    expect(lines(file).map((l) => [l.ref, l.action])).toEqual([
      [a, 'allow'],
      [b, 'block'],
    ]);
  });

  it('flush() and close() write what is held', async () => {
    const file = logFile();
    const log = createDecisionLog({ sink: file, coalesceAllows: true });
    const a = log.write(allow);
    log.flush?.();
    expect(lines(file).map((l) => l.ref)).toEqual([a]);
    const b = log.write(allow);
    await log.close();
    expect(lines(file).map((l) => l.ref)).toEqual([a, b]);
  });

  it('writes held tails that are not ASCII as UTF-8, beside ASCII ones in the same write', async () => {
    const file = logFile();
    const log = createDecisionLog({ sink: file, coalesceAllows: true });
    onTestFinished(() => log.close());
    const plain = formatDecisionTail({ ...allow, subject: { name: 'read_file' } });
    const wide = formatDecisionTail({ ...allow, subject: { name: 'caf\u00e9_\u2713_\u{1f600}' } });
    // The same tail objects again and again (as the gate writes them), and a record line between.
    const refs = [
      log.writeTail!('allow', plain),
      log.writeTail!('allow', wide),
      log.writeTail!('allow', wide),
      log.write({ ...allow, subject: { name: '\u00fc' } }),
      log.writeTail!('allow', plain),
    ];
    await new Promise((r) => setImmediate(r));
    const text = fs.readFileSync(file, 'utf8');
    expect(text).not.toContain('\ufffd');
    const got = text.split('\n').filter(Boolean);
    expect(got.map((l) => (JSON.parse(l) as { ref: string }).ref)).toEqual(refs);
    expect(got.map((l) => l.slice(l.indexOf(',"uid"')) + '\n')).toEqual([
      plain,
      wide,
      wide,
      formatDecisionTail({ ...allow, subject: { name: '\u00fc' } }),
      plain,
    ]);
    // And a later batch of ASCII lines alone is still exact.
    const last = log.writeTail!('allow', plain);
    await new Promise((r) => setImmediate(r));
    expect(fs.readFileSync(file, 'utf8').endsWith(`"ref":"${last}"${plain}`)).toBe(true);
  });

  it('without the option every line is written before write returns', () => {
    const file = logFile();
    const log = createDecisionLog({ sink: file });
    onTestFinished(() => log.close());
    const a = log.write(allow);
    expect(lines(file).map((l) => l.ref)).toEqual([a]);
  });
});
