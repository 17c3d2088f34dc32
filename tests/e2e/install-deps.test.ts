import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';

const root = path.resolve(__dirname, '../..');
const TEST_ONLY = ['ansible', 'ansible-lint', 'lintian', 'chromium', 'zsh', 'libnss-extrausers', 'python3-seccomp'];

// install-deps.sh against a dpkg that reports nothing installed and an apt-get that records what it was asked for:
// the package lists are what the script decides, without touching the machine.
function requested(args: string[]): string[] {
  const bin = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-l41-deps-'));
  onTestFinished(() => fs.rmSync(bin, { recursive: true, force: true }));
  const log = path.join(bin, 'apt.log');
  fs.writeFileSync(path.join(bin, 'dpkg-query'), '#!/bin/sh\nexit 1\n', { mode: 0o755 });
  fs.writeFileSync(path.join(bin, 'apt-get'), `#!/bin/sh\necho "$@" >> ${log}\n`, { mode: 0o755 });
  const r = spawnSync('bash', [path.join(root, 'scripts/install-deps.sh'), ...args], {
    env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
    encoding: 'utf8',
  });
  expect(r.status, r.stderr).toBe(0);
  const install = fs
    .readFileSync(log, 'utf8')
    .split('\n')
    .find((l) => l.includes('install'));
  return install!.split(' ').filter((w) => w && !w.startsWith('-') && w !== 'install');
}

describe('scripts/install-deps.sh', () => {
  it('--build installs the toolchain and what the service runs, none of the test tools', () => {
    const pkgs = requested(['--build']);
    expect(pkgs).toEqual(expect.arrayContaining(['g++', 'make', 'python3', 'nftables', 'dpkg-dev', 'fakeroot']));
    for (const p of TEST_ONLY) expect(pkgs).not.toContain(p);
  });

  it('without an argument (.ci/run) installs the build part and the test tools', () => {
    const pkgs = requested([]);
    expect(pkgs).toEqual(expect.arrayContaining(['g++', 'nftables', ...TEST_ONLY]));
  });

  it('is called with --build by install.sh and demo.sh, and in full by .ci/run', () => {
    const calls = (f: string) =>
      fs
        .readFileSync(path.join(root, f), 'utf8')
        .split('\n')
        .filter((l) => /^\s*bash scripts\/install-deps\.sh/.test(l));
    expect(calls('scripts/install.sh')).toEqual(['bash scripts/install-deps.sh --build']);
    expect(calls('scripts/demo.sh')).toEqual(['bash scripts/install-deps.sh --build']);
    expect(calls('.ci/run')).toEqual(['bash scripts/install-deps.sh']);
  });

  it('refuses an unknown argument', () => {
    const r = spawnSync('bash', [path.join(root, 'scripts/install-deps.sh'), '--tests'], { encoding: 'utf8' });
    expect(r.status).toBe(2);
  });
});
