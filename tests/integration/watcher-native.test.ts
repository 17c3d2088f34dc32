// The native watcher alone, in this process, on a tmpfs the test mounts: the
// leashed account gets EPERM outside its whitelist, root and this process do not.
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable, type NativeWatcher } from '../../src/native.js';
import { parseDrain, type DrainedRecord } from '../native/helpers/drain.js';
import { copyBinaries, createUser, isEperm, mountTmpfs, runAs, runCleanups, type Cleanup } from './helpers/fslab.js';

const root = process.getuid?.() === 0 && nativeAvailable();

describe.skipIf(!root)('native fanotify watcher (in process)', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let w: NativeWatcher;
  let records: DrainedRecord[] = [];

  beforeEach(() => {
    dir = mountTmpfs(cleanups);
    records = [];
    w = new (loadNative().Watcher)({
      onRecords: () => records.push(...parseDrain(w.drain())),
      watchdogMs: 0,
    });
    cleanups.push(() => w.close());
    // The watcher never outlives the test, even if the test hangs.
    const guard = setTimeout(() => w.close(), 30_000);
    cleanups.push(() => clearTimeout(guard));
  });
  afterEach(() => runCleanups(cleanups));

  it('denies a read outside the whitelist with EPERM and allows one inside', async () => {
    const user = createUser(cleanups);
    const bins = copyBinaries(path.join(dir, 'bin'), ['cat']);
    fs.mkdirSync(path.join(dir, 'work'));
    fs.mkdirSync(path.join(dir, 'secret'));
    fs.writeFileSync(path.join(dir, 'work', 'a.txt'), 'inside');
    fs.writeFileSync(path.join(dir, 'secret', 'b.txt'), 'outside');
    w.setSubjects([
      {
        uid: user.uid,
        failMode: 'closed',
        policy: {
          fail_mode: 'closed',
          filesystem: { mode: 'whitelist', allow: [path.join(dir, 'work'), path.join(dir, 'bin')], deny: [] },
          commands: { mode: 'whitelist', allow: ['cat'], deny: [] },
        },
      },
    ]);
    w.mark(dir);
    w.start();

    const ok = runAs(user, [bins.cat!, path.join(dir, 'work', 'a.txt')]);
    expect(ok).toMatchObject({ code: 0, stdout: 'inside' });
    const denied = runAs(user, [bins.cat!, path.join(dir, 'secret', 'b.txt')]);
    expect(isEperm(denied)).toBe(true);
    // root and this process (the watcher's own PID) are answered allow in native code.
    expect(fs.readFileSync(path.join(dir, 'secret', 'b.txt'), 'utf8')).toBe('outside');

    await new Promise((r) => setTimeout(r, 100));
    const block = records.find((r) => r.action === 'block');
    expect(block).toMatchObject({
      uid: user.uid,
      surface: 'filesystem',
      reason: 'not_allowed',
      subject: path.join(dir, 'secret', 'b.txt'),
    });
    expect(records.some((r) => r.surface === 'commands' && r.action === 'allow' && r.rule === 'cat')).toBe(true);
    expect(w.stats()).toMatchObject({ self: expect.any(Number), writeErrors: 0 });
    expect(w.stats().self).toBeGreaterThan(0);
  });

  it('reports the pidfd mode the kernel accepted', () => {
    expect(typeof w.reportsPidfd).toBe('boolean');
    expect(w.fd).toBeGreaterThan(2);
  });
});
