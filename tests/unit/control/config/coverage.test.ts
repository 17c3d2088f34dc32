import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../../../src/control/config/load.js';
import { coverageFindings } from '../../../../src/control/policy/validate.js';

const lookup = () => ({ name: 'fido', uid: 1234, gid: 2345, home: '/home/fido' });
const config = (text: string) => parseConfig(`user: fido\n${text}`, 'test.yaml', { lookup }).config;

// Root on ext4, /home on its own ext4, /srv a tmpfs, /proc pseudo (never reported).
const MOUNTINFO = [
  '22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda1 rw',
  '23 22 254:1 / /home rw,relatime shared:2 - ext4 /dev/vdb1 rw',
  '24 22 0:30 / /srv rw,relatime shared:3 - tmpfs tmpfs rw',
  '25 22 0:4 / /proc rw,nosuid shared:4 - proc proc rw',
].join('\n');

describe('coverageFindings (leash validate: marks against this host)', () => {
  it('a whitelist whose paths lie on one filesystem warns for the others, per surface', () => {
    const f = coverageFindings(
      config('filesystem: { allow: [/home/fido/work] }\ncommands: { allow: [/usr/bin/git] }\n'),
      MOUNTINFO,
    );
    expect(f.map((x) => [x.code, x.severity, x.path])).toEqual([
      ['marks_partial_coverage', 'warning', 'filesystem.mode'],
      ['marks_partial_coverage', 'warning', 'commands.mode'],
    ]);
    expect(f[0]!.unmarked).toEqual(['/srv']);
    expect(f[0]!.message).toContain('/srv');
  });

  it('filesystem.watch covers the rest; a blacklist or a switched-off enforcer says nothing', () => {
    expect(coverageFindings(config('filesystem: { allow: [/home/fido/work], watch: [/srv, /] }\n'), MOUNTINFO)).toEqual(
      [],
    );
    expect(
      coverageFindings(
        config('filesystem: { mode: blacklist, deny: [/srv/x] }\ncommands: { mode: blacklist, deny: [ssh] }\n'),
        MOUNTINFO,
      ),
    ).toEqual([]);
    expect(coverageFindings(config('enforcers: { filesystem: false }\n'), MOUNTINFO)).toEqual([]);
  });

  it('a whitelist with no paths marks nothing: every real filesystem is unwatched', () => {
    const f = coverageFindings(config(''), MOUNTINFO);
    expect(f[0]!.unmarked).toEqual(['/', '/home', '/srv']);
  });
});

describe('interpreter findings use the watcher list (launchers and the loader too)', () => {
  it.each(['xargs', 'env', '/lib64/ld-linux-x86-64.so.2', 'ld64.so.2', 'bash', 'python3.12'])('%s', (entry) => {
    const { findings } = parseConfig(`user: fido\ncommands: { allow: ["${entry}"] }\n`, 't.yaml', { lookup });
    expect(findings).toContainEqual(
      expect.objectContaining({ code: 'commands_interpreter_allowed', entry, path: 'commands.allow' }),
    );
  });

  it('plain tools say nothing', () => {
    const { findings } = parseConfig('user: fido\ncommands: { allow: [git, ls] }\n', 't.yaml', { lookup });
    expect(findings.map((f) => f.code)).not.toContain('commands_interpreter_allowed');
  });
});
