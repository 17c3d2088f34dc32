import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createNamespaceScanner } from '../../../../src/dataplane/watcher/namespaces.js';
import type { NativeAddon, NativeWatcher, WatcherSubject } from '../../../../src/native.js';

// A /proc of our own making (the scanner takes its root): each namespace is a file whose inode stands for it, each
// process a directory owned by its UID. The subject's process in a mount namespace systemd made for its unit (its
// user namespace ours, a ramfs for /run/credentials) against one in a user and mount namespace the agent made.
const SUBJECT = 64137;
const isRoot = process.getuid?.() === 0;
const mountinfo = (extra: string) => `22 1 8:1 / / rw - ext4 /dev/sda1 rw\n${extra}`;

describe.skipIf(!isRoot)("namespace scanner: whose mounts are a subject's", () => {
  let dir = '';
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  function fakeProc(): string {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'l37-proc-'));
    const proc = (pid: string, uid: number, ns: { mnt: string; user: string }, info: string) => {
      const d = path.join(dir, pid);
      fs.mkdirSync(path.join(d, 'ns'), { recursive: true });
      fs.linkSync(path.join(dir, 'ns', ns.mnt), path.join(d, 'ns', 'mnt'));
      fs.linkSync(path.join(dir, 'ns', ns.user), path.join(d, 'ns', 'user'));
      fs.writeFileSync(path.join(d, 'mountinfo'), info);
      fs.chownSync(d, uid, uid);
    };
    fs.mkdirSync(path.join(dir, 'ns'));
    for (const n of ['host-mnt', 'host-user', 'unit-mnt', 'agent-mnt', 'agent-user'])
      fs.writeFileSync(path.join(dir, 'ns', n), n);
    proc('self', 0, { mnt: 'host-mnt', user: 'host-user' }, mountinfo(''));
    // systemd's unit namespace: our user namespace, a ramfs of its own.
    proc(
      '100',
      SUBJECT,
      { mnt: 'unit-mnt', user: 'host-user' },
      mountinfo('40 22 0:77 / /run/credentials/a.service ro - ramfs ramfs ro\n'),
    );
    // The agent's own: unshare -Urm, a tmpfs.
    proc(
      '200',
      SUBJECT,
      { mnt: 'agent-mnt', user: 'agent-user' },
      mountinfo('41 22 0:88 / /tmp/x rw - tmpfs none rw\n'),
    );
    return dir;
  }

  it("marks and reports only the filesystem mounted in a namespace the subject made, not systemd's for its unit", () => {
    const proc = fakeProc();
    const marked: string[] = [];
    const warned: Record<string, unknown>[] = [];
    const scanner = createNamespaceScanner({
      native: {
        MountWatch: class {
          supported = false;
          close() {}
        },
        nsKill: () => false,
      } as unknown as NativeAddon,
      watcher: { mark: (at: string) => void marked.push(at) } as unknown as NativeWatcher,
      subjects: () =>
        new Map([[SUBJECT, { uid: SUBJECT, policy: null, failMode: 'open' } as unknown as WatcherSubject]]),
      log: {},
      warn: (o) => void warned.push(o),
      proc,
    });
    scanner.scan();
    expect(marked).toEqual([`${proc}/200/root/tmp/x`]);
    expect(warned.filter((w) => String(w.msg).startsWith('marked'))).toEqual([
      expect.objectContaining({ dev: '0:88', fsType: 'tmpfs', pid: 200 }),
    ]);
    expect(scanner.status()).toMatchObject({ known: 1, marked: 1, markedDevs: ['0:88'] });
    scanner.close();
  });
});
