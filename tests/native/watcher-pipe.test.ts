// The watcher's read loop fed crafted events through a FIFO (no kernel group, no
// root needed): the loop reads any descriptor (STYLE #8), answers on another one.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable, type NativeWatcher } from '../../src/native.js';
import { parseDrain, type DrainedRecord } from './helpers/drain.js';

const FAN_OPEN_PERM = 0x10000;
const FAN_OPEN_EXEC_PERM = 0x40000;
const FAN_ALLOW = 1;
const FAN_DENY = 2;

function event(mask: number, fd: number, pid: number): Buffer {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(24, 0); // event_len
  b.writeUInt8(3, 4); // FANOTIFY_METADATA_VERSION
  b.writeUInt16LE(24, 6); // metadata_len
  b.writeBigUInt64LE(BigInt(mask), 8);
  b.writeInt32LE(fd, 16);
  b.writeInt32LE(pid, 20);
  return b;
}

describe.skipIf(!nativeAvailable())('watcher loop on crafted events', () => {
  const cleanups: (() => void)[] = [];
  let dir = '';
  let evW = -1;
  let respR = -1;
  let w: NativeWatcher;
  let records: DrainedRecord[] = [];
  let childPid = 0;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-pipe-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    execFileSync('mkfifo', [path.join(dir, 'ev'), path.join(dir, 'resp')]);
    // O_RDWR on a FIFO never blocks on open and never sees EOF: fine for a loop we close ourselves.
    const evR = fs.openSync(path.join(dir, 'ev'), 'r+');
    evW = fs.openSync(path.join(dir, 'ev'), 'w');
    respR = fs.openSync(path.join(dir, 'resp'), 'r+');
    const respW = fs.openSync(path.join(dir, 'resp'), 'w');
    cleanups.push(() => [evR, evW, respR, respW].forEach((fd) => fs.closeSync(fd)));
    records = [];
    w = new (loadNative().Watcher)({
      onRecords: () => records.push(...parseDrain(w.drain())),
      eventFd: evR,
      responseFd: respW,
      watchdogMs: 0,
    });
    cleanups.push(() => w.close());
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    cleanups.push(() => child.kill('SIGKILL'));
    childPid = child.pid!;
    fs.mkdirSync(path.join(dir, 'ok'));
    fs.writeFileSync(path.join(dir, 'ok', 'f'), 'x');
    fs.writeFileSync(path.join(dir, 'other'), 'y');
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
  });
  afterEach(() => {
    while (cleanups.length) cleanups.pop()!();
  });

  function answer(mask: number, file: string, pid: number): number {
    const fd = fs.openSync(file, 'r'); // the loop closes it, as it closes a kernel event's fd
    fs.writeSync(evW, event(mask, fd, pid));
    const r = Buffer.alloc(8);
    expect(fs.readSync(respR, r, 0, 8, null)).toBe(8);
    expect(r.readInt32LE(0)).toBe(fd);
    return r.readUInt32LE(4);
  }

  it('judges a subject process by its credentials (a pidfd kept per process)', async () => {
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), childPid)).toBe(FAN_ALLOW);
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'other'), childPid)).toBe(FAN_DENY);
    await new Promise((r) => setTimeout(r, 50));
    expect(records.map((r) => [r.action, r.reason, r.subject])).toEqual([
      ['allow', 'allow_entry', path.join(dir, 'ok', 'f')],
      ['block', 'not_allowed', path.join(dir, 'other')],
    ]);
    expect(w.stats().procFallback).toBe(0);
  });

  it('reads credentials from /proc when asked to', () => {
    w.close();
    const evR2 = fs.openSync(path.join(dir, 'ev'), 'r+');
    cleanups.push(() => fs.closeSync(evR2));
    const respW2 = fs.openSync(path.join(dir, 'resp'), 'w');
    cleanups.push(() => fs.closeSync(respW2));
    w = new (loadNative().Watcher)({
      onRecords: () => {},
      eventFd: evR2,
      responseFd: respW2,
      watchdogMs: 0,
      identity: 'proc',
    });
    cleanups.push(() => w.close());
    w.setSubjects([{ uid: process.getuid!(), failMode: 'closed', policy: null }]);
    w.start();
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), childPid)).toBe(FAN_DENY);
    expect(w.stats().procFallback).toBe(1);
  });

  it('does not trust a kept pidfd whose process has died (ESRCH)', async () => {
    w.setSubjects([{ uid: process.getuid!(), failMode: 'closed', policy: null }]);
    const a = spawn('sleep', ['30'], { stdio: 'ignore' });
    cleanups.push(() => a.kill('SIGKILL'));
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), a.pid!)).toBe(FAN_DENY); // subject: no policy
    await new Promise<void>((r) => {
      a.on('exit', () => r());
      a.kill('SIGKILL');
    });
    // The same PID, now dead: its kept pidfd no longer answers, and a fresh one cannot be opened.
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), a.pid!)).toBe(FAN_DENY);
    expect(w.stats().unknownProcess).toBe(1);
  });

  it('answers its own PID allow without judging', () => {
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'other'), process.pid)).toBe(FAN_ALLOW);
    expect(w.stats()).toMatchObject({ self: 1, subjectDeny: 0 });
  });

  it('judges exec events against the commands policy', () => {
    expect(answer(FAN_OPEN_EXEC_PERM, path.join(dir, 'other'), childPid)).toBe(FAN_DENY);
    // A copy of its own, named sleep: the host's binary can have other hard links (perf's ~/.debug cache makes
    // them), and a file with another name the subject (root here) could have made is judged by it (hardlinked).
    const hostSleep = fs.realpathSync(execFileSync('sh', ['-c', 'command -v sleep'], { encoding: 'utf8' }).trim());
    const sleepBin = path.join(dir, 'bin', 'sleep');
    fs.mkdirSync(path.dirname(sleepBin));
    fs.copyFileSync(hostSleep, sleepBin);
    expect(answer(FAN_OPEN_EXEC_PERM, sleepBin, childPid)).toBe(FAN_ALLOW);
  });

  it('denies a process that no longer exists', () => {
    const gone = spawn('true');
    const pid = gone.pid!;
    return new Promise<void>((resolve) => {
      gone.on('exit', () => {
        setTimeout(() => {
          expect(answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), pid)).toBe(FAN_DENY);
          expect(w.stats().unknownProcess).toBe(1);
          resolve();
        }, 20);
      });
    });
  });

  it('allows an event with pid 0 (a process outside its PID namespace) unjudged: counted, no line of its own', async () => {
    // 'other' is outside the subject's whitelist: a visible process of the subject's UID is denied it.
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'other'), 0)).toBe(FAN_ALLOW);
    expect(answer(FAN_OPEN_EXEC_PERM, path.join(dir, 'other'), 0)).toBe(FAN_ALLOW);
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'other'), 0)).toBe(FAN_ALLOW);
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'other'), childPid)).toBe(FAN_DENY);
    await new Promise((r) => setTimeout(r, 50));
    // One line: the visible process's block. The pid-0 events are counted, for JavaScript's rate-limited line.
    expect(records.map((r) => [r.action, r.reason])).toEqual([['block', 'not_allowed']]);
    expect(w.stats()).toMatchObject({ foreignPidOpen: 2, foreignPidExec: 1, unknownProcess: 0, subjectDeny: 1 });
    expect(w.stats().decisions).toEqual(
      expect.arrayContaining([
        { surface: 'filesystem', action: 'allow', reason: 'foreign_pid_namespace', count: 2 },
        { surface: 'commands', action: 'allow', reason: 'foreign_pid_namespace', count: 1 },
      ]),
    );
    expect(w.drain().foreignPid).toEqual([2, 1]);
  });

  it('allows everything for a UID that is not a subject', () => {
    w.setSubjects([{ uid: 4_000_000_000, failMode: 'closed', policy: null }]);
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'other'), childPid)).toBe(FAN_ALLOW);
    expect(w.stats().nonSubject).toBe(1);
  });

  it('judges a subject with no policy by its fail mode', () => {
    w.setSubjects([{ uid: process.getuid!(), failMode: 'closed', policy: null }]);
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), childPid)).toBe(FAN_DENY);
    w.setSubjects([{ uid: process.getuid!(), failMode: 'open', policy: null }]);
    expect(answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), childPid)).toBe(FAN_ALLOW);
  });

  it('queues every deny but counts allows beyond the queue bound', async () => {
    w.close();
    const evR2 = fs.openSync(path.join(dir, 'ev'), 'r+');
    cleanups.push(() => fs.closeSync(evR2));
    const respW2 = fs.openSync(path.join(dir, 'resp'), 'w');
    cleanups.push(() => fs.closeSync(respW2));
    const w2 = new (loadNative().Watcher)({
      onRecords: () => {},
      eventFd: evR2,
      responseFd: respW2,
      watchdogMs: 0,
      queueAllows: 3,
    });
    cleanups.push(() => w2.close());
    w2.setSubjects([
      {
        uid: process.getuid!(),
        failMode: 'closed',
        policy: {
          fail_mode: 'closed',
          filesystem: { mode: 'whitelist', allow: [path.join(dir, 'ok')], deny: [] },
          commands: { mode: 'blacklist', allow: [], deny: [] },
        },
      },
    ]);
    w2.start();
    for (let i = 0; i < 10; i++) answer(FAN_OPEN_PERM, path.join(dir, 'ok', 'f'), childPid);
    for (let i = 0; i < 5; i++) answer(FAN_OPEN_PERM, path.join(dir, 'other'), childPid);
    // The loop queues a decision just after answering it: drain until the last one is in.
    const recs: DrainedRecord[] = [];
    let dropped = 0;
    for (let t = 0; t < 200 && recs.length < 8; t++) {
      if (t > 0) await new Promise((r) => setTimeout(r, 5));
      const d = w2.drain();
      recs.push(...parseDrain(d));
      dropped += d.droppedAllows;
    }
    expect(recs.filter((r) => r.action === 'allow')).toHaveLength(3);
    expect(recs.filter((r) => r.action === 'block')).toHaveLength(5);
    expect(dropped).toBe(7);
  });
});
