import { describe, expect, it } from 'vitest';
import { interpreterWarnings } from '../../../../src/engine/interpreters.js';
import {
  markCoverage,
  mountOf,
  nonGlobPrefix,
  parseMountinfo,
  policyRoots,
} from '../../../../src/dataplane/watcher/policy.js';
import type { FsCmdPolicy } from '../../../../src/native.js';

const MOUNTINFO = [
  '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
  '23 22 0:21 / /proc rw,nosuid shared:2 - proc proc rw',
  '24 22 0:5 / /dev rw shared:3 - devtmpfs udev rw',
  '30 22 8:2 / /home rw shared:4 - ext4 /dev/sda2 rw',
  '31 30 0:40 / /home/fido/scratch rw shared:5 - tmpfs tmpfs rw',
  '32 22 0:41 / /mnt/with\\040space rw shared:6 - tmpfs tmpfs rw',
].join('\n');

function pol(fs: Partial<FsCmdPolicy['filesystem']>, cmd: Partial<FsCmdPolicy['commands']> = {}): FsCmdPolicy {
  return {
    fail_mode: 'closed',
    filesystem: { mode: 'whitelist', allow: [], deny: [], ...fs },
    commands: { mode: 'blacklist', allow: [], deny: [], ...cmd },
  };
}

describe('fs watcher policy helpers', () => {
  it.each([
    ['/home/a', '/home/a'],
    ['/home//a/./b/', '/home/a/b'],
    ['/srv/*.log', '/srv'],
    ['/srv/**/x', '/srv'],
    ['/*', '/'],
    ['/a[bc]/d', '/'],
    ['relative', null],
  ])('nonGlobPrefix(%j) = %j', (entry, want) => {
    expect(nonGlobPrefix(entry)).toBe(want);
  });

  it('policyRoots covers path entries and the directories of absolute command entries', () => {
    expect(
      policyRoots(
        pol({ allow: ['/home/a', '/srv/*.log'], deny: ['/etc/shadow'] }, { allow: ['/opt/x/bin/tool', 'ls'] }),
      ),
    ).toEqual(['/etc/shadow', '/home/a', '/opt/x/bin', '/srv']);
    expect(policyRoots(null)).toEqual([]);
    expect(policyRoots(pol({ allow: ['/home/a'], watch: ['/', '/var//lib/'] }))).toEqual(['/', '/home/a', '/var/lib']);
  });

  it('warns when a commands whitelist names an interpreter, the loader or a launcher', () => {
    const w = interpreterWarnings({
      mode: 'whitelist',
      allow: [
        'ls',
        'sh',
        '/usr/bin/python3.11',
        'node',
        'perl',
        'ruby',
        'ld-linux-x86-64.so.2',
        'env',
        'busybox',
        'cat',
      ],
      deny: [],
    });
    expect(w.map((x) => x.entry)).toEqual([
      'sh',
      '/usr/bin/python3.11',
      'node',
      'perl',
      'ruby',
      'ld-linux-x86-64.so.2',
      'env',
      'busybox',
    ]);
    expect(w.find((x) => x.entry === 'ld-linux-x86-64.so.2')!.what).toBe('the dynamic loader');
    // A blacklist's allow list is never consulted: nothing to warn about there.
    expect(interpreterWarnings({ mode: 'blacklist', allow: ['sh'], deny: [] })).toEqual([]);
  });

  it('parses mountinfo, octal escapes included, and finds the mount of a path', () => {
    const m = parseMountinfo(MOUNTINFO);
    expect(m).toHaveLength(6);
    expect(m[5]).toEqual({ mountId: 32, dev: '0:41', mountPoint: '/mnt/with space', fsType: 'tmpfs' });
    expect(mountOf(m, '/home/fido/x')!.mountPoint).toBe('/home');
    expect(mountOf(m, '/home/fido/scratch/y')!.mountPoint).toBe('/home/fido/scratch');
    expect(mountOf(m, '/homes')!.mountPoint).toBe('/');
  });

  it('markCoverage: a whitelist whose paths sit on one filesystem leaves the others unjudged', () => {
    const mounts = parseMountinfo(MOUNTINFO);
    const w = markCoverage({
      policy: pol({ allow: ['/home/fido/work'] }, { mode: 'whitelist', allow: ['ls'] }),
      mounts,
    });
    expect(w.map((x) => x.surface)).toEqual(['filesystem', 'commands']);
    // /home is marked (the work dir lies on it); the tmpfs at /home/fido/scratch is not beneath the root.
    expect(w[0]!.unmarked).toEqual(['/', '/dev', '/home/fido/scratch', '/mnt/with space']);
    // filesystem.watch closes the gap; pseudo filesystems (proc) are never listed.
    const all = markCoverage({
      policy: pol({ allow: ['/home/fido/work'] }),
      watch: ['/', '/dev', '/home/fido/scratch', '/mnt/with space'],
      mounts,
    });
    expect(all).toEqual([]);
    // A blacklist is default-allow: partial marks are not a coverage problem.
    expect(markCoverage({ policy: pol({ mode: 'blacklist', deny: ['/etc'] }), mounts })).toEqual([]);
  });
});
