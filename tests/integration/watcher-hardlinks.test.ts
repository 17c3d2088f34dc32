// Hard links, from the leashed account's side: a link it makes in an allowed directory to a file its
// policy denies is refused through the allowed name (`hardlinked`, with the inode and link count in
// the decision line); a root-owned link it cannot write, and every file with one name, are judged by
// name as before. The native watcher in this process, on a tmpfs the test mounts (docs/filesystem.md,
// "Hard links").
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable, type FsCmdPolicy, type NativeWatcher } from '../../src/native.js';
import { parseDrain, type DrainedRecord } from '../native/helpers/drain.js';
import { copyBinaries, createUser, isEperm, mountTmpfs, runAs, runCleanups, type Cleanup } from './helpers/fslab.js';

const root = process.getuid?.() === 0 && nativeAvailable();

describe.skipIf(!root)('watcher: hard links', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let w: NativeWatcher;
  let records: DrainedRecord[] = [];
  let user: { name: string; uid: number; gid: number };
  let cat = '';
  const p = (...s: string[]): string => path.join(dir, ...s);

  beforeEach(() => {
    if (fs.readFileSync('/proc/sys/fs/protected_hardlinks', 'utf8').trim() !== '1')
      throw new Error('these tests need fs.protected_hardlinks = 1 (the default); it is not, on this host');
    dir = mountTmpfs(cleanups);
    records = [];
    user = createUser(cleanups);
    cat = copyBinaries(p('bin'), ['cat']).cat!;
    fs.mkdirSync(p('work'));
    fs.chownSync(p('work'), user.uid, user.gid); // the agent's workspace: it may make names here
    fs.mkdirSync(p('secret'));
    w = new (loadNative().Watcher)({
      onRecords: () => records.push(...parseDrain(w.drain())),
      watchdogMs: 0,
    });
    cleanups.push(() => w.close());
    const guard = setTimeout(() => w.close(), 30_000);
    cleanups.push(() => clearTimeout(guard));
  });
  afterEach(() => runCleanups(cleanups));

  function start(filesystem: FsCmdPolicy['filesystem'], linkCheck = true): void {
    if (!linkCheck) {
      // The measurement switch (bench/fanotify): the watcher as it was before the check.
      w.close();
      w = new (loadNative().Watcher)({
        onRecords: () => records.push(...parseDrain(w.drain())),
        watchdogMs: 0,
        linkCheck: false,
      });
    }
    w.setSubjects([
      {
        uid: user.uid,
        failMode: 'closed',
        policy: { fail_mode: 'closed', filesystem, commands: { mode: 'whitelist', allow: ['cat'], deny: [] } },
      },
    ]);
    w.mark(dir);
    w.start();
  }
  let marks = 0;
  /**
   * Waits until every decision made so far has been drained: the agent reads a fresh marker file, and its line,
   * queued after all of theirs, arrives (a fixed 150 ms sleep missed a line on a loaded machine).
   */
  const settle = async (): Promise<void> => {
    const mark = p('work', `settle-${++marks}`);
    fs.writeFileSync(mark, 'm', { mode: 0o644 });
    expect(asAgent(cat, mark)).toMatchObject({ code: 0 });
    for (let i = 0; i < 500 && !records.some((r) => r.subject === mark); i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(records.some((r) => r.subject === mark)).toBe(true);
  };
  const asAgent = (...argv: string[]) => runAs(user, argv);
  const blocksOf = (file: string) => records.filter((r) => r.action === 'block' && r.subject === file);

  it('whitelist: a link the agent makes in its allowed directory to a root-owned 0666 file is EPERM through it', async () => {
    fs.writeFileSync(p('secret', 'shared'), 'root data', { mode: 0o666 });
    fs.chmodSync(p('secret', 'shared'), 0o666);
    start({ mode: 'whitelist', allow: [p('work'), p('bin')], deny: [] });

    // The agent may link it (it can read and write it: fs.protected_hardlinks lets it).
    expect(asAgent('ln', p('secret', 'shared'), p('work', 'link'))).toMatchObject({ code: 0 });
    expect(isEperm(asAgent(cat, p('secret', 'shared')))).toBe(true); // by its own name: not_allowed
    const through = asAgent(cat, p('work', 'link'));
    expect(isEperm(through)).toBe(true);
    expect(through.stdout).not.toContain('root data');

    await settle();
    const st = fs.statSync(p('work', 'link'));
    expect(blocksOf(p('work', 'link'))[0]).toMatchObject({
      uid: user.uid,
      surface: 'filesystem',
      reason: 'hardlinked',
      inode: st.ino,
      nlink: 2,
      rule: null,
    });
    expect(blocksOf(p('secret', 'shared'))[0]).toMatchObject({ reason: 'not_allowed' });
    expect(w.stats().hardlinked).toBe(1);
  });

  it('without the check (the measurement switch) the same link reads the denied file: the hole it closes', async () => {
    fs.writeFileSync(p('secret', 'shared'), 'root data', { mode: 0o666 });
    fs.chmodSync(p('secret', 'shared'), 0o666);
    start({ mode: 'whitelist', allow: [p('work'), p('bin')], deny: [] }, false);
    expect(asAgent('ln', p('secret', 'shared'), p('work', 'link'))).toMatchObject({ code: 0 });
    expect(isEperm(asAgent(cat, p('secret', 'shared')))).toBe(true);
    expect(asAgent(cat, p('work', 'link'))).toMatchObject({ code: 0, stdout: 'root data' });
    await settle();
    expect(records.find((r) => r.subject === p('work', 'link'))).toMatchObject({
      action: 'allow',
      reason: 'allow_entry',
    });
  });

  it('a root-owned hard link the agent cannot write stays readable; a file with one name is judged by its name', async () => {
    fs.writeFileSync(p('secret', 'tool'), 'system helper', { mode: 0o644 });
    fs.linkSync(p('secret', 'tool'), p('work', 'tool')); // made by root, as git's helpers are
    fs.writeFileSync(p('work', 'plain'), 'one name', { mode: 0o666 });
    start({ mode: 'whitelist', allow: [p('work'), p('bin')], deny: [] });

    expect(asAgent(cat, p('work', 'tool'))).toMatchObject({ code: 0, stdout: 'system helper' });
    expect(asAgent(cat, p('work', 'plain'))).toMatchObject({ code: 0, stdout: 'one name' });
    // And the agent cannot make such a link itself (not its file, not writable by it).
    expect(asAgent('ln', p('secret', 'tool'), p('work', 'tool2')).code).not.toBe(0);

    await settle();
    expect(records.filter((r) => r.action === 'block')).toEqual([]);
    expect(records.find((r) => r.subject === p('work', 'tool'))).toMatchObject({ reason: 'allow_entry' });
    expect(w.stats().hardlinked).toBe(0);
  });

  it('every mode the kernel lets the agent link is denied through a second name; the others stay readable', async () => {
    // [mode, what the watcher answers through a root-made second name]
    const modes: [number, 'allow' | 'block'][] = [
      [0o644, 'allow'],
      [0o664, 'block'], // group read+write: conservative (the group bits are also an ACL's mask)
      [0o666, 'block'],
      [0o646, 'block'],
      [0o4666, 'allow'], // set-user-ID: may_linkat refuses a non-owner
      [0o2666, 'block'], // set-group-ID without group exec: linkable
      [0o2676, 'allow'], // set-group-ID and group-executable: may_linkat refuses
    ];
    for (const [m] of modes) {
      const f = p('secret', `f${m.toString(8)}`);
      fs.writeFileSync(f, `mode ${m.toString(8)}`);
      fs.chmodSync(f, m);
      fs.linkSync(f, p('work', `r${m.toString(8)}`));
    }
    start({ mode: 'whitelist', allow: [p('work'), p('bin')], deny: [] });
    const linkables: string[] = [];
    for (const [m, want] of modes) {
      const o = m.toString(8);
      const linkable = asAgent('ln', p('secret', `f${o}`), p('work', `a${o}`)).code === 0;
      if (linkable) linkables.push(o);
      const r = asAgent(cat, p('work', `r${o}`));
      // The boundary: whatever the kernel lets the agent link is never readable through a link.
      if (linkable) expect({ mode: o, eperm: isEperm(r) }).toEqual({ mode: o, eperm: true });
      expect({ mode: o, answer: isEperm(r) ? 'block' : r.code === 0 ? 'allow' : r.stderr }).toEqual({
        mode: o,
        answer: want,
      });
    }
    // What fs.protected_hardlinks lets a non-owner link (may_linkat): the rule's premise, as this kernel says.
    expect(linkables).toEqual(['666', '646', '2666']);
    await settle();
    for (const [m, want] of modes) {
      if (want === 'block')
        expect(blocksOf(p('work', `r${m.toString(8)}`))[0]).toMatchObject({
          reason: 'hardlinked',
          nlink: expect.any(Number),
        });
    }
  });

  it("the agent's own file with two names in its allowed directory is hardlinked, unless plain allow entries name both", async () => {
    start({ mode: 'whitelist', allow: [p('work'), p('bin'), p('work', 'lit-a'), p('work', 'lit-b')], deny: [] });
    expect(
      asAgent('sh', '-c', `echo mine > ${p('work', 'own')} && ln ${p('work', 'own')} ${p('work', 'own2')}`),
    ).toMatchObject({
      code: 0,
    });
    // Its other name could be anywhere the agent can write on this filesystem: not known, denied.
    expect(isEperm(asAgent(cat, p('work', 'own2')))).toBe(true);
    // Two plain allow entries that are both its names: every name is known and allowed.
    expect(
      asAgent('sh', '-c', `echo lit > ${p('work', 'lit-a')} && ln ${p('work', 'lit-a')} ${p('work', 'lit-b')}`),
    ).toMatchObject({
      code: 0,
    });
    expect(asAgent(cat, p('work', 'lit-b'))).toMatchObject({ code: 0, stdout: 'lit\n' });
    // A third name elsewhere makes the names unknown again.
    expect(asAgent('ln', p('work', 'lit-a'), p('work', 'lit-c'))).toMatchObject({ code: 0 });
    expect(isEperm(asAgent(cat, p('work', 'lit-b')))).toBe(true);

    await settle();
    expect(blocksOf(p('work', 'own2'))[0]).toMatchObject({
      reason: 'hardlinked',
      nlink: 2,
      inode: fs.statSync(p('work', 'own')).ino,
    });
    expect(records.find((r) => r.subject === p('work', 'lit-b') && r.action === 'allow')).toMatchObject({
      reason: 'allow_entry',
      rule: p('work', 'lit-b'),
    });
    expect(blocksOf(p('work', 'lit-b'))[0]).toMatchObject({ reason: 'hardlinked', nlink: 3 });
  });

  it('blacklist: a link to a file named by a deny entry is EPERM through the allowed name, with the entry as the rule', async () => {
    fs.writeFileSync(p('secret', 'key'), 'denied data', { mode: 0o666 });
    fs.chmodSync(p('secret', 'key'), 0o666);
    start({ mode: 'blacklist', allow: [], deny: [p('secret', 'key')] });
    expect(asAgent('ln', p('secret', 'key'), p('work', 'k'))).toMatchObject({ code: 0 });
    const through = asAgent(cat, p('work', 'k'));
    expect(isEperm(through)).toBe(true);
    expect(through.stdout).not.toContain('denied data');
    // The agent's own two-name file with no denied name: blacklist allows it.
    expect(asAgent('sh', '-c', `echo ok > ${p('work', 'a')} && ln ${p('work', 'a')} ${p('work', 'b')}`)).toMatchObject({
      code: 0,
    });
    expect(asAgent(cat, p('work', 'b'))).toMatchObject({ code: 0, stdout: 'ok\n' });

    await settle();
    expect(blocksOf(p('work', 'k'))[0]).toMatchObject({
      reason: 'hardlinked',
      rule: p('secret', 'key'),
      nlink: 2,
      inode: fs.statSync(p('secret', 'key')).ino,
    });
    expect(records.find((r) => r.subject === p('work', 'b'))).toMatchObject({ action: 'allow', reason: 'mode_allow' });
  });
  it('exec: a link the agent makes, named like an allowed command, to a program it may write is EPERM at exec', async () => {
    const prog = copyBinaries(p('secret'), ['true']).true!;
    fs.chmodSync(prog, 0o777); // root-owned, writable by anyone: the agent may link it
    start({ mode: 'whitelist', allow: [p('work'), p('bin'), p('secret')], deny: [] });
    expect(asAgent(prog).code).not.toBe(0); // by its own name: not a whitelisted command
    expect(asAgent('ln', prog, p('work', 'cat'))).toMatchObject({ code: 0 });
    const r = asAgent(p('work', 'cat'));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/Operation not permitted|EPERM/);
    expect(asAgent(cat, p('bin', 'cat')).code).toBe(0); // the real cat, one name: still runs

    await settle();
    expect(records.find((x) => x.surface === 'commands' && x.subject === p('work', 'cat'))).toMatchObject({
      action: 'block',
      reason: 'hardlinked',
      nlink: 2,
      inode: fs.statSync(prog).ino,
    });
  });
});
