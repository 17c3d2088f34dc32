import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { rerootPath, rerootPolicy } from '../../../src/cli/demo-fs.js';
import { loadConfig } from '../../../src/control/config/load.js';
import { compilePolicy, decide } from '../../../src/engine/index.js';
import { fsCmdPolicyOf, policyRoots } from '../../../src/dataplane/watcher/policy.js';

const T = '/tmp/leash-lab-demo-x/fs';

describe('demo: re-rooting a policy on the demo tmpfs', () => {
  it('moves absolute paths (globs included) under the root and leaves relative ones alone', () => {
    expect(rerootPath('/etc/shadow', T)).toBe(`${T}/etc/shadow`);
    expect(rerootPath('/etc/sudoers.d/', T)).toBe(`${T}/etc/sudoers.d`);
    expect(rerootPath('/home/*/.ssh/**', T)).toBe(`${T}/home/*/.ssh/**`);
    expect(rerootPath('/', T)).toBe(T);
    expect(rerootPath('relative', T)).toBe('relative');
  });

  it('re-roots filesystem entries, watch paths and absolute commands; basenames stay', () => {
    const p = rerootPolicy(
      {
        fail_mode: 'closed',
        filesystem: { mode: 'whitelist', allow: ['/work'], deny: ['/work/private'], watch: ['/srv'] },
        commands: { mode: 'blacklist', allow: [], deny: ['nc', '/usr/bin/ssh'] },
      },
      T,
    );
    expect(p).toEqual({
      fail_mode: 'closed',
      filesystem: { mode: 'whitelist', allow: [`${T}/work`], deny: [`${T}/work/private`], watch: [`${T}/srv`] },
      commands: { mode: 'blacklist', allow: [], deny: ['nc', `${T}/usr/bin/ssh`] },
    });
  });

  it('re-roots commands.interpreters (the system loaders land on the copies the demo puts on the root)', () => {
    const p = rerootPolicy(
      {
        fail_mode: 'closed',
        filesystem: { mode: 'blacklist', allow: [], deny: [] },
        commands: {
          mode: 'whitelist',
          allow: ['/usr/bin/ls'],
          deny: [],
          interpreters: ['/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2'],
        },
      },
      T,
    );
    expect(p.commands).toEqual({
      mode: 'whitelist',
      allow: [`${T}/usr/bin/ls`],
      deny: [],
      interpreters: [`${T}/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2`],
    });
    const config = loadConfig(path.resolve('packaging/leash.default.yaml'), { lookup: () => null }).config;
    const c = compilePolicy({ ...p, network: config.network, tools: config.tools });
    const loader = `${T}/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2`;
    expect(decide('commands', { binary: loader, interpreterOf: `${T}/usr/bin/ls` }, c)).toMatchObject({
      action: 'allow',
      reason: 'interpreter_of',
    });
    expect(decide('commands', { binary: loader }, c)).toMatchObject({ action: 'block', reason: 'interpreter_direct' });
  });

  it('refuses a root that would turn into a glob or is not absolute', () => {
    const p = fsCmdPolicyOf(loadConfig(path.resolve('packaging/leash.default.yaml'), { lookup: () => null }).config);
    expect(() => rerootPolicy(p, '/tmp/x*')).toThrow(/re-root/);
    expect(() => rerootPolicy(p, 'tmp/x')).toThrow(/re-root/);
  });

  it("the shipped policy re-rooted: every mark lies on the root, and it decides what the host's policy would", () => {
    const config = loadConfig(path.resolve('packaging/leash.default.yaml'), { lookup: () => null }).config;
    const p = rerootPolicy(fsCmdPolicyOf(config), T);
    const roots = policyRoots(p);
    expect(roots.length).toBeGreaterThan(0);
    for (const r of roots) expect(r.startsWith(`${T}/`)).toBe(true);
    const host = compilePolicy({ ...fsCmdPolicyOf(config), network: config.network, tools: config.tools });
    const demo = compilePolicy({ ...p, network: config.network, tools: config.tools });
    for (const f of [
      '/etc/shadow',
      '/root/.ssh/id_ed25519',
      '/etc/sudoers.d/x',
      '/home/a/work/notes.txt',
      '/etc/hosts',
    ]) {
      const a = decide('filesystem', { path: f }, host);
      const b = decide('filesystem', { path: T + f }, demo);
      expect({ f, action: b.action, reason: b.reason }).toEqual({ f, action: a.action, reason: a.reason });
    }
    for (const c of ['nc', 'sudo', 'ls', 'cat']) {
      const a = decide('commands', { binary: `/usr/bin/${c}` }, host);
      const b = decide('commands', { binary: `${T}/bin/${c}` }, demo);
      expect({ c, action: b.action }).toEqual({ c, action: a.action });
    }
    expect(decide('commands', { binary: `${T}/bin/nc` }, demo).action).toBe('block');
    expect(decide('filesystem', { path: `${T}/etc/shadow` }, demo).action).toBe('block');
  });
});
