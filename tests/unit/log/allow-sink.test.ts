import fs from 'node:fs';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createDecisionLog, type DecisionRecord } from '../../../src/log/decisions.js';
import { createJournal, teeDecisionsToJournal } from '../../../src/log/journal.js';
import { countDecisions, createMetrics, parseMetricsText } from '../../../src/metrics/metrics.js';
import { readDecisions, tmpSink } from './sink.js';

// The decision log's allow sink (issue 43): the proxy's native path writes plain allow lines to the log's own
// descriptor and reports its counts; these are the log's promises to it. The native side is tried in
// tests/integration/network-native-verdict.test.ts.

const file = () => tmpSink('leash-sink-');
const read = readDecisions;

describe('decision log: the allow sink for native writers', () => {
  it('gives its descriptor: every line written under `all`, only counted under `summary`, none under `sampled`', async () => {
    const all = createDecisionLog({ sink: file() });
    const summary = createDecisionLog({ sink: file(), allows: { mode: 'summary', intervalMs: 60_000 } });
    const sampled = createDecisionLog({ sink: file(), allows: { mode: 'sampled', intervalMs: 60_000 } });
    const held = createDecisionLog({ sink: file(), coalesceAllows: true });
    const stdout = createDecisionLog({ sink: 'stdout' });
    onTestFinished(async () => {
      for (const l of [all, summary, sampled, held, stdout]) await l.close();
    });
    expect(all.allowSink!()).toEqual({ fd: expect.any(Number), write: true });
    expect(summary.allowSink!()).toEqual({ fd: expect.any(Number), write: false });
    expect(sampled.allowSink!()).toBeNull();
    // Lines held back to the end of a turn would be overtaken by a native write.
    expect(held.allowSink!()).toBeNull();
    expect(stdout.allowSink?.() ?? null).toBeNull();
    await all.close();
    expect(all.allowSink!()).toBeNull();
  });

  it('a line written to the sink lands in the file between the log own lines; a reopen hands the new descriptor over', async () => {
    const f = file();
    const log = createDecisionLog({ sink: f });
    onTestFinished(() => log.close());
    const fds: number[] = [];
    const off = log.onReopen!((fd) => fds.push(fd));
    const rec: DecisionRecord = { uid: 7, surface: 'network', action: 'block', reason: 'not_allowed', subject: {} };
    log.write(rec);
    fs.writeSync(log.allowSink!()!.fd, '{"native":1}\n');
    log.write(rec);
    expect(fs.readFileSync(f, 'utf8').split('\n')[1]).toBe('{"native":1}');
    fs.renameSync(f, `${f}.1`);
    log.reopen();
    expect(fds).toEqual([log.allowSink!()!.fd]);
    fs.writeSync(fds[0]!, '{"native":2}\n');
    expect(fs.readFileSync(f, 'utf8')).toBe('{"native":2}\n');
    off();
    fs.renameSync(f, `${f}.2`);
    log.reopen();
    expect(fds).toHaveLength(1);
  });

  it('counts allows written elsewhere into the summary, the metrics and the journal skipped count', async () => {
    const f = file();
    const m = createMetrics();
    const journal = createJournal({ socket: '/run/test/socket', allowSample: 0, send: () => 0 });
    const base = createDecisionLog({ sink: f, allows: { mode: 'summary', intervalMs: 60_000 } });
    const log = countDecisions(teeDecisionsToJournal(base, journal, 'service'), m);
    expect(log.allowSink!()).toEqual({ fd: expect.any(Number), write: false });
    log.allowsElsewhere!(1001, 'network', 'allow_entry', 40, 0);
    log.allowsElsewhere!(1001, 'network', 'allow_entry', 2, 0);
    const text = await m.text();
    const total = parseMetricsText(text).find(
      (s) => s.name === 'leash_decisions_total' && s.labels.reason === 'allow_entry' && s.labels.action === 'allow',
    );
    expect(total?.value).toBe(42);
    expect(journal.stats().allowsSkipped).toBe(42);
    await log.close();
    const sums = read(f).filter((l) => l.reason === 'allow_summary');
    expect(sums.map((l) => [l.uid, l.surface, l.subject.allowed, l.subject.written])).toEqual([
      [1001, 'network', 42, 0],
    ]);
  });

  it('a journal that samples allows takes the sink away: those lines must reach it through JavaScript', async () => {
    const journal = createJournal({ socket: '/run/test/socket', allowSample: 10, send: () => 0 });
    const log = teeDecisionsToJournal(createDecisionLog({ sink: file() }), journal, 'service');
    onTestFinished(() => log.close());
    expect(log.allowSink!()).toBeNull();
  });
});
