// Events from outside the watcher's PID namespace (pid 0): the loop's totals become at most one decision-log
// line per surface per interval, carrying the exact count, and one journal warning; status and doctor say what a
// namespace other than the initial one means. The real watcher in a child PID namespace:
// tests/integration/watcher-pidns.test.ts.
import { describe, expect, it } from 'vitest';
import {
  INITIAL_PID_NS,
  createForeignPidLog,
  pidNsOf,
  pidNsWarnings,
} from '../../../../src/dataplane/watcher/pidns.js';
import { createMetrics, parseMetricsText, pidNamespaceFamily, summarize } from '../../../../src/metrics/metrics.js';

function harness(intervalMs = 60_000) {
  let t = 1_000_000;
  const lines: Record<string, unknown>[] = [];
  const warnings: Record<string, unknown>[] = [];
  const log = createForeignPidLog({
    intervalMs,
    now: () => t,
    write: (text) => {
      expect(text.endsWith('\n')).toBe(true);
      for (const l of text.trimEnd().split('\n')) lines.push(JSON.parse(l) as Record<string, unknown>);
    },
    warn: (o) => warnings.push(o),
  });
  return { log, lines, warnings, advance: (ms: number) => (t += ms), now: () => t };
}

describe('foreign PID namespace log', () => {
  it('writes one line per surface per interval, with every event counted, and warns once', () => {
    const h = harness();
    h.log.update([0, 0]);
    expect(h.warnings).toHaveLength(0);
    const first = h.now();
    // 5,000 opens and 3 execs arrive over 59 s of drains: nothing written yet, one warning.
    for (let i = 1; i <= 590; i++) {
      h.advance(100);
      h.log.update([Math.floor((i * 5000) / 590), Math.min(i, 3)]);
    }
    h.log.update([5000, 3]);
    expect(h.lines).toHaveLength(0);
    expect(h.warnings).toHaveLength(1);
    h.advance(1100);
    h.log.update([5000, 3]);
    expect(h.lines).toEqual([
      expect.objectContaining({
        surface: 'filesystem',
        action: 'allow',
        reason: 'foreign_pid_namespace',
        subject: { allowed: 5000, since: new Date(first + 100).toISOString() },
        rule: null,
      }),
      expect.objectContaining({
        surface: 'commands',
        reason: 'foreign_pid_namespace',
        subject: expect.objectContaining({ allowed: 3 }),
      }),
    ]);
    // No uid: these events have no process the watcher can name.
    expect(h.lines[0]).not.toHaveProperty('uid');
    expect(Object.keys(h.lines[0]!)).toEqual(['ts', 'ref', 'surface', 'action', 'reason', 'subject', 'rule']);
    // Quiet: no more lines; the next event opens a new period, written a whole interval later.
    h.advance(120_000);
    h.log.update([5000, 3]);
    expect(h.lines).toHaveLength(2);
    h.log.update([5007, 3]);
    h.advance(59_999);
    h.log.update([5010, 3]);
    expect(h.lines).toHaveLength(2);
    h.advance(1);
    h.log.update([5010, 3]);
    expect(h.lines).toHaveLength(3);
    expect(h.lines[2]).toMatchObject({ surface: 'filesystem', subject: { allowed: 10 } });
    expect(h.warnings).toHaveLength(1);
  });

  it('flush writes what is counted and not yet logged, and nothing twice', () => {
    const h = harness();
    h.log.update([42, 0]);
    h.log.flush();
    expect(h.lines).toEqual([
      expect.objectContaining({ surface: 'filesystem', subject: expect.objectContaining({ allowed: 42 }) }),
    ]);
    h.log.flush();
    h.advance(61_000);
    h.log.update([42, 0]);
    expect(h.lines).toHaveLength(1);
  });

  it('never writes or warns when no event came from outside', () => {
    const h = harness(10);
    for (let i = 0; i < 50; i++) {
      h.advance(100);
      h.log.update([0, 0]);
      h.log.update(undefined);
    }
    h.log.flush();
    expect(h.lines).toEqual([]);
    expect(h.warnings).toEqual([]);
  });
});

describe('PID namespace warnings', () => {
  it('say nothing for processes in the initial namespace, and name the process, namespace and count otherwise', () => {
    expect(pidNsWarnings({ service: INITIAL_PID_NS, watcher: INITIAL_PID_NS }, 0)).toEqual([]);
    const w = pidNsWarnings({ service: INITIAL_PID_NS, watcher: 4026532999 }, 17);
    expect(w).toHaveLength(1);
    expect(w[0]).toContain('watcher');
    expect(w[0]).toContain('4026532999');
    expect(w[0]).toContain('foreign_pid_namespace, 17 so far');
  });

  it('reads this process namespace', () => {
    const own = pidNsOf();
    expect(own).toBeGreaterThan(0);
    expect(pidNsOf(process.pid)).toBe(own);
    expect(pidNsOf(2 ** 22 + 12345)).toBeNull();
  });

  it('the metrics carry each process namespace and the foreign count to leash status', async () => {
    const m = createMetrics();
    m.collect(() => [pidNamespaceFamily('service', INITIAL_PID_NS)]);
    m.collect(() => [
      pidNamespaceFamily('watcher', 4026532999),
      {
        name: 'leash_watcher_foreign_pid_events',
        help: 'x',
        type: 'counter',
        values: [
          { value: 5, labels: { surface: 'filesystem' } },
          { value: 2, labels: { surface: 'commands' } },
        ],
      },
    ]);
    const live = summarize(parseMetricsText(await m.text()));
    expect(live.pidNamespaces).toEqual({ service: INITIAL_PID_NS, watcher: 4026532999 });
    expect(live.foreignPidEvents).toBe(7);
  });
});
