// The watcher loop's plain allows under config logging.allows (summary, sampled): counted exactly,
// never formatted unless written, while every block is still written whole. Crafted events
// through a FIFO, as in watcher-pipe.test.ts (no kernel group, no root).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { loadNative, nativeAvailable, type NativeWatcher, type WatcherOptions } from '../../src/native.js';
import { parseDrain, type DrainedRecord } from './helpers/drain.js';

const FAN_OPEN_PERM = 0x10000;
const FAN_ALLOW = 1;
const FAN_DENY = 2;

function event(fd: number, pid: number): Buffer {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(24, 0);
  b.writeUInt8(3, 4);
  b.writeUInt16LE(24, 6);
  b.writeBigUInt64LE(BigInt(FAN_OPEN_PERM), 8);
  b.writeInt32LE(fd, 16);
  b.writeInt32LE(pid, 20);
  return b;
}

interface Drained {
  records: DrainedRecord[];
  allows: number[];
}

interface Lab {
  w: NativeWatcher;
  open(file: string): number;
  drain(): Drained;
  /** Drains until `n` decisions (records plus counted allows) are in: the loop answers an event before it
   * queues or counts its decision (off the opener's wait), so a drain right after an answer can miss the last. */
  settle(n: number): Drained;
  ok: string;
  other: string;
}

function lab(extra: Partial<WatcherOptions>): Lab {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-l42-allows-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  execFileSync('mkfifo', [path.join(dir, 'ev'), path.join(dir, 'resp')]);
  const evR = fs.openSync(path.join(dir, 'ev'), 'r+');
  const evW = fs.openSync(path.join(dir, 'ev'), 'w');
  const respR = fs.openSync(path.join(dir, 'resp'), 'r+');
  const respW = fs.openSync(path.join(dir, 'resp'), 'w');
  onTestFinished(() => [evR, evW, respR, respW].forEach((fd) => fs.closeSync(fd)));
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  onTestFinished(() => void child.kill('SIGKILL'));
  fs.mkdirSync(path.join(dir, 'ok'));
  fs.writeFileSync(path.join(dir, 'ok', 'f'), 'x');
  fs.writeFileSync(path.join(dir, 'other'), 'y');
  const w = new (loadNative().Watcher)({
    onRecords: () => {},
    eventFd: evR,
    responseFd: respW,
    watchdogMs: 0,
    ...extra,
  });
  onTestFinished(() => w.close());
  w.setSubjects([
    {
      uid: process.getuid!(),
      failMode: 'closed',
      policy: {
        fail_mode: 'closed',
        filesystem: { mode: 'whitelist', allow: [path.join(dir, 'ok')], deny: [] },
        commands: { mode: 'whitelist', allow: ['sleep'], deny: [] },
      },
    },
  ]);
  w.start();
  return {
    w,
    ok: path.join(dir, 'ok', 'f'),
    other: path.join(dir, 'other'),
    open(file) {
      const fd = fs.openSync(file, 'r');
      fs.writeSync(evW, event(fd, child.pid!));
      const r = Buffer.alloc(8);
      expect(fs.readSync(respR, r, 0, 8, null)).toBe(8);
      return r.readUInt32LE(4);
    },
    drain() {
      const d = w.drain();
      return { records: parseDrain(d), allows: d.allows ?? [] };
    },
    settle(n) {
      const records: DrainedRecord[] = [];
      // [uid, exec] -> [allowed, written], summed over the drains
      const tally = new Map<string, [number, number, number, number]>();
      const deadline = Date.now() + 5000;
      for (;;) {
        const d = this.drain();
        records.push(...d.records);
        const a = d.allows;
        for (let i = 0; i + 3 < a.length; i += 4) {
          const [uid, exec, allowed, written] = [a[i]!, a[i + 1]!, a[i + 2]!, a[i + 3]!];
          const t = tally.get(`${uid}/${exec}`) ?? [uid, exec, 0, 0];
          tally.set(`${uid}/${exec}`, [uid, exec, t[2] + allowed, t[3] + written]);
        }
        let seen = records.length;
        for (const t of tally.values()) seen += t[2] - t[3];
        if (seen >= n || Date.now() > deadline) return { records, allows: [...tally.values()].flat() };
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
      }
    },
  };
}

describe.skipIf(!nativeAvailable())('watcher allow lines (logging.allows)', () => {
  it('summary: counts every allow exactly, writes no allow line, writes every block', () => {
    const l = lab({ allowLines: 'summary' });
    let allows = 0;
    for (let i = 0; i < 300; i++) {
      expect(l.open(l.ok)).toBe(FAN_ALLOW);
      allows++;
      if (i % 50 === 0) expect(l.open(l.other)).toBe(FAN_DENY);
    }
    const d = l.settle(allows + 6);
    expect(d.records.map((r) => r.action)).toEqual(Array(6).fill('block'));
    expect(d.allows).toEqual([process.getuid!(), 0, allows, 0]);
    // Counts are handed over once: the next drain starts from zero.
    expect(l.open(l.ok)).toBe(FAN_ALLOW);
    expect(l.settle(1).allows).toEqual([process.getuid!(), 0, 1, 0]);
    expect(l.drain().allows).toEqual([]);
  });

  it('sampled: the first allow of each period is written whole, and counted as written', async () => {
    // A period long enough that 100 opens fit in it on a loaded machine.
    const l = lab({ allowLines: 'sampled', sampleMs: 1500 });
    const t0 = Date.now();
    for (let i = 0; i < 100; i++) l.open(l.ok);
    const first = l.settle(100);
    // On a machine so loaded that the opens outlast the period, a second line is due: still exact.
    const lines = Date.now() - t0 < 1500 ? 1 : first.records.length;
    expect(lines).toBeLessThanOrEqual(2);
    expect(first.records.map((r) => [r.action, r.subject])).toEqual(Array(lines).fill(['allow', l.ok]));
    expect(first.allows).toEqual([process.getuid!(), 0, 100, lines]);
    await new Promise((r) => setTimeout(r, 1550));
    for (let i = 0; i < 10; i++) l.open(l.ok);
    const second = l.settle(10);
    expect(second.records).toHaveLength(1);
    expect(second.allows).toEqual([process.getuid!(), 0, 10, 1]);
  });

  it('all (the default): each allow its line, nothing counted apart', () => {
    const l = lab({});
    for (let i = 0; i < 20; i++) l.open(l.ok);
    const d = l.settle(20);
    expect(d.records).toHaveLength(20);
    expect(d.allows).toEqual([]);
  });

  it('refuses an allowLines it does not know', () => {
    expect(() => lab({ allowLines: 'some' as 'all' })).toThrow(/allowLines/);
  });
});
