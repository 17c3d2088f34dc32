import { describe, expect, it } from 'vitest';
import { createDecisionLog, formatDecisionTail, type DecisionRecord } from '../../../src/log/decisions.js';
import { readDecisions, tmpSink } from './sink.js';

const sink = () => tmpSink('leash-l42-');
const read = readDecisions;

const allow = (uid: number, surface: DecisionRecord['surface'] = 'network'): DecisionRecord => ({
  uid,
  surface,
  action: 'allow',
  reason: 'allow_entry',
  subject: { domain: 'example.com', port: 443 },
  rule: 'example.com',
});
const block: DecisionRecord = { ...allow(1001), action: 'block', reason: 'not_allowed', rule: null };

describe('decision log allow lines (logging.allows)', () => {
  it('summary: every block written, allows counted exactly into one line per subject and surface', async () => {
    const f = sink();
    const log = createDecisionLog({ sink: f, allows: { mode: 'summary', intervalMs: 60_000 } });
    for (let i = 0; i < 1000; i++) log.write(allow(1001));
    for (let i = 0; i < 7; i++) log.write(allow(1002, 'tools'));
    log.writeTail('allow', formatDecisionTail(allow(1001)));
    log.write(block);
    log.countAllows(1001, 'filesystem', 5000, 0);
    // An approval's outcome is always a line of its own, even an allow.
    log.write({ ...allow(1002), reason: 'approved_once', approval: { request: 'abcdefghijklmnop', how: 'once' } });
    await log.close();
    const lines = read(f);
    expect(lines.filter((l) => l.action === 'block')).toHaveLength(1);
    expect(lines.filter((l) => l.reason === 'approved_once')).toHaveLength(1);
    const sums = lines.filter((l) => l.reason === 'allow_summary');
    expect(sums.map((l) => [l.uid, l.surface, l.subject.allowed, l.subject.written])).toEqual([
      [1001, 'network', 1001, 0],
      [1002, 'tools', 7, 0],
      [1001, 'filesystem', 5000, 0],
    ]);
    expect(lines).toHaveLength(5);
  });

  it('sampled: the first allow of a period is written whole and the summary counts it as written', async () => {
    const f = sink();
    const log = createDecisionLog({ sink: f, allows: { mode: 'sampled', intervalMs: 60_000 } });
    for (let i = 0; i < 50; i++) log.write(allow(1001));
    await log.close();
    const lines = read(f);
    expect(lines.map((l) => l.reason)).toEqual(['allow_entry', 'allow_summary']);
    expect(lines[1]!.subject).toMatchObject({ allowed: 50, written: 1 });
  });

  it('writes a summary every period, and none for a period without allows', async () => {
    const f = sink();
    const log = createDecisionLog({ sink: f, allows: { mode: 'summary', intervalMs: 100 } });
    log.write(allow(1001));
    await new Promise((r) => setTimeout(r, 250));
    expect(read(f).map((l) => l.subject.allowed)).toEqual([1]);
    log.write(allow(1001));
    log.write(allow(1001));
    await log.close();
    expect(read(f).map((l) => l.subject.allowed)).toEqual([1, 2]);
  });

  it('all (no setting): one line per allow, as the spec writes it', async () => {
    const f = sink();
    const log = createDecisionLog({ sink: f });
    for (let i = 0; i < 5; i++) log.write(allow(1001));
    await log.close();
    expect(read(f).map((l) => l.reason)).toEqual(Array(5).fill('allow_entry'));
  });
});
