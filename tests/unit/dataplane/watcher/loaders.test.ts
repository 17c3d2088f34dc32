import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { findSystemLoaders } from '../../../../src/dataplane/watcher/loaders.js';
import { fsCmdPolicyOf } from '../../../../src/dataplane/watcher/policy.js';

describe('commands.interpreters default: the system dynamic loaders', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('finds loaders in the standard paths by their real path, not their symlinks', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-loaders-'));
    dirs.push(root);
    fs.mkdirSync(path.join(root, 'usr/lib/x86_64-linux-gnu'), { recursive: true });
    fs.mkdirSync(path.join(root, 'lib64'));
    fs.writeFileSync(path.join(root, 'usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2'), '');
    fs.writeFileSync(path.join(root, 'usr/lib/x86_64-linux-gnu/libc.so.6'), '');
    fs.writeFileSync(path.join(root, 'usr/lib/ld-musl-x86_64.so.1'), '');
    fs.symlinkSync('../usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2', path.join(root, 'lib64/ld-linux-x86-64.so.2'));
    fs.symlinkSync('nowhere', path.join(root, 'lib64/ld-linux.so.2'));
    expect(findSystemLoaders(root)).toEqual([
      '/usr/lib/ld-musl-x86_64.so.1',
      '/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2',
    ]);
  });

  it('gives the watcher the configured list, or the default when the key is absent', () => {
    const base = {
      fail_mode: 'closed' as const,
      filesystem: { mode: 'whitelist' as const, allow: [], deny: [] },
      commands: { mode: 'whitelist' as const, allow: ['/usr/bin/cat'], deny: [] },
    };
    expect(fsCmdPolicyOf(base, () => ['/lib/ld.so.2']).commands.interpreters).toEqual(['/lib/ld.so.2']);
    const set = { ...base, commands: { ...base.commands, interpreters: [] } };
    expect(fsCmdPolicyOf(set, () => ['/lib/ld.so.2']).commands.interpreters).toEqual([]);
  });
});
