import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { raiseForStart, START_NICE } from '../../../../src/control/daemon/priority.js';

const isRoot = process.getuid?.() === 0;
/** The session's scheduling group nice (sched_autogroup), or null where the kernel has none. */
const groupNice = (): number | null => {
  try {
    return Number(/ nice (-?\d+)/.exec(fs.readFileSync('/proc/self/autogroup', 'utf8'))![1]);
  } catch {
    return null;
  }
};

describe.skipIf(!isRoot)('the start runs ahead of the load, then competes like any process (root)', () => {
  it('raises the starting thread and what it spawns; the restore puts both back to the nice it found', async () => {
    const before = os.getPriority(0);
    const group = groupNice();
    const raised = raiseForStart();
    try {
      expect(raised.skipped).toBeNull();
      expect(os.getPriority(0)).toBe(START_NICE);
      // Under sched_autogroup a nice counts only inside the session's group: the group is raised with it.
      if (group !== null && group > START_NICE) expect(groupNice()).toBe(START_NICE);
      const child = spawn('sleep', ['30'], { stdio: 'ignore' });
      await new Promise((r) => child.once('spawn', r));
      try {
        // A process started during the start (the watcher) inherits the raise...
        expect(os.getPriority(child.pid!)).toBe(START_NICE);
        raised.restore();
        // ...and is put back with the service once it is ready.
        expect(os.getPriority(child.pid!)).toBe(before);
        expect(os.getPriority(0)).toBe(before);
        expect(groupNice()).toBe(group);
      } finally {
        child.kill('SIGKILL');
      }
    } finally {
      os.setPriority(0, before);
    }
  });

  it('says why when it cannot raise (already there), and its restore changes nothing', () => {
    const before = os.getPriority(0);
    os.setPriority(0, START_NICE);
    try {
      const raised = raiseForStart();
      expect(raised.skipped).toMatch(/already/);
      raised.restore();
      expect(os.getPriority(0)).toBe(START_NICE);
    } finally {
      os.setPriority(0, before);
    }
  });
});
