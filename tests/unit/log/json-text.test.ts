// The decision log builds its lines without JSON.stringify (src/log/json-text.ts); every line must
// still be exactly what JSON.stringify writes, whatever strings and values a record holds.
import { describe, expect, it } from 'vitest';
import {
  createDecisionLog,
  formatDecision,
  formatDecisionTail,
  type DecisionRecord,
} from '../../../src/log/decisions.js';
import { jsonString, jsonText } from '../../../src/log/json-text.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mulberry32 as rng } from '../../lab/prng.js';

const CHARS = ['a', ' ', '"', '\\', '\n', '\u0000', '\u001f', '\u007f', 'é', '\u2028', '😀', '\ud800', '\udc00', '/'];

function genString(r: () => number): string {
  let s = '';
  const n = Math.floor(r() * 8);
  for (let i = 0; i < n; i++) s += CHARS[Math.floor(r() * CHARS.length)];
  return s;
}

function genValue(r: () => number, depth: number): unknown {
  const k = r();
  if (depth > 3 || k < 0.5) {
    const pick = Math.floor(r() * 12);
    return [
      genString(r),
      Math.floor(r() * 1000),
      -0,
      NaN,
      Infinity,
      1.5e300,
      true,
      null,
      undefined,
      () => 1,
      new Date(0),
      Symbol('s'),
    ][pick];
  }
  if (k < 0.7) return Array.from({ length: Math.floor(r() * 4) }, () => genValue(r, depth + 1));
  const o: Record<string, unknown> = r() < 0.1 ? (Object.create(null) as Record<string, unknown>) : {};
  const n = Math.floor(r() * 5);
  for (let i = 0; i < n; i++) o[r() < 0.2 ? String(Math.floor(r() * 3)) : genString(r)] = genValue(r, depth + 1);
  return o;
}

describe('jsonText = JSON.stringify', () => {
  it.each([
    ['plain', 'tools/call'],
    ['quote', 'a"b'],
    ['lone surrogate', '\ud800x'],
    ['pair', '😀'],
    ['control', '\u0001'],
    ['separator', '\u2028'],
  ])('string: %s', (_t, s) => {
    expect(jsonString(s)).toBe(JSON.stringify(s));
  });

  it('agrees on 20,000 generated values (seed 20261130), toJSON, class instances and index keys included', () => {
    const r = rng(20261130);
    class Thing {
      x = 1;
    }
    const fixed: unknown[] = [
      new Thing(),
      { toJSON: () => 'j' },
      { b: 1, 2: 'two', a: undefined },
      [undefined, () => 1],
    ];
    for (const v of fixed) expect(jsonText(v)).toBe(JSON.stringify(v));
    for (let i = 0; i < 20_000; i++) {
      const v = genValue(r, 0);
      expect(jsonText(v)).toBe(JSON.stringify(v));
    }
  });

  it('refuses what JSON.stringify refuses (a cycle, a BigInt)', () => {
    const o: Record<string, unknown> = {};
    o.self = o;
    expect(() => jsonText(o)).toThrow(TypeError);
    expect(() => jsonText({ n: 1n })).toThrow(TypeError);
  });
});

describe('decision lines', () => {
  const oracle = (rec: DecisionRecord, ref: string, now: Date) =>
    `${JSON.stringify({
      ts: now.toISOString(),
      ref,
      uid: rec.uid,
      surface: rec.surface,
      action: rec.action,
      reason: rec.reason,
      subject: rec.subject,
      ...(rec.rule !== undefined ? { rule: rec.rule } : {}),
      ...(rec.severity !== undefined ? { severity: rec.severity } : {}),
      ...(rec.findings !== undefined ? { findings: rec.findings } : {}),
    })}\n`;

  it('formatDecision writes exactly the JSON.stringify line, for generated subjects and rules', () => {
    const r = rng(7);
    const now = new Date(1_764_000_000_123);
    for (let i = 0; i < 5_000; i++) {
      const rec: DecisionRecord = {
        uid: Math.floor(r() * 70000),
        surface: (['network', 'filesystem', 'commands'] as const)[i % 3]!,
        action: r() < 0.5 ? 'allow' : 'block',
        reason: genString(r),
        subject: genValue(r, 1),
        rule: r() < 0.3 ? null : r() < 0.5 ? undefined : genString(r),
        severity: r() < 0.1 ? 'critical' : undefined,
      };
      expect(formatDecision(rec, 'abcdefgh', now)).toBe(oracle(rec, 'abcdefgh', now));
    }
  });

  it('writeTail writes the same line as write for the same record', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-tail-'));
    try {
      const file = path.join(dir, 'd.jsonl');
      const log = createDecisionLog({ sink: file, coalesceAllows: true });
      const rec: DecisionRecord = {
        uid: 1001,
        surface: 'tools',
        action: 'allow',
        reason: 'allow_entry',
        subject: { method: 'tools/call', name: 'read_file' },
        rule: 'read_file',
      };
      const a = log.write(rec);
      const b = log.writeTail('allow', formatDecisionTail(rec));
      await log.close();
      const lines = fs
        .readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.map((l) => l.ref)).toEqual([a, b]);
      const strip = (l: Record<string, unknown>) => ({ ...l, ts: 0, ref: 0 });
      expect(strip(lines[1]!)).toEqual(strip(lines[0]!));
      expect(lines[1]).toMatchObject({ uid: 1001, action: 'allow', subject: { name: 'read_file' } });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
