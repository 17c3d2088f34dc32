// Reads a native watcher drain the way a test wants it: each decision-log line parsed, and
// checked to be byte for byte what formatDecision writes for the same decision, time and ref.
import { expect } from 'vitest';
import { formatDecision, type DecisionRecord } from '../../../src/log/decisions.js';
import type { WatcherDrain } from '../../../src/native.js';

/** One decision, with the subject's path or binary flattened. */
export interface DrainedRecord {
  ts: string;
  ref: string;
  uid: number;
  surface: 'filesystem' | 'commands';
  action: 'allow' | 'block';
  reason: string;
  subject: string;
  /** interpreter_of: the program the interpreter was loaded for. */
  interpreterOf?: string;
  /** hardlinked: the file's inode and link count. */
  inode?: number;
  nlink?: number;
  rule: string | null;
}

export function parseDrain(d: WatcherDrain): DrainedRecord[] {
  const text = d.lines.toString('utf8');
  const lines = text.split('\n');
  expect(lines.pop()).toBe(''); // whole lines only
  const recs = lines.map((l) => {
    const o = JSON.parse(l) as DecisionRecord & {
      ts: string;
      ref: string;
      subject: { path?: string; binary?: string; interpreterOf?: string; inode?: number; nlink?: number };
    };
    expect(`${l}\n`).toBe(formatDecision(o, o.ref, new Date(o.ts)));
    expect(o.ref).toMatch(/^[a-z2-7]{8}$/);
    const of = o.subject.interpreterOf;
    const { inode, nlink } = o.subject;
    return {
      ...o,
      subject: o.subject.path ?? o.subject.binary!,
      ...(of ? { interpreterOf: of } : {}),
      ...(nlink !== undefined ? { inode, nlink } : {}),
    } as DrainedRecord;
  });
  expect(recs).toHaveLength(d.count);
  expect(recs.filter((r) => r.action === 'block')).toHaveLength(d.denies);
  return recs;
}
