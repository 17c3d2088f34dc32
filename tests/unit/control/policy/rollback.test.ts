import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

// The profile write fails on demand; everything else is the real store.
const failWrite = { on: false };
vi.mock('../../../../src/control/policy/profiles.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../../../src/control/policy/profiles.js')>();
  return {
    ...real,
    writeProfileText: (dir: string, name: string, text: string) => {
      if (failWrite.on) throw Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' });
      real.writeProfileText(dir, name, text);
    },
  };
});

const { configSchema } = await import('../../../../src/control/config/schema.js');
const { bindingsFile, readBindings } = await import('../../../../src/control/policy/bindings.js');
const { bind, saveProfile } = await import('../../../../src/control/policy/commands.js');
const { floorOf } = await import('../../../../src/control/policy/fragment.js');
const { loadProfile } = await import('../../../../src/control/policy/profiles.js');
const { discoverFrom, parsePasswd } = await import('../../../../src/control/subjects/discovery.js');

let stateDir: string;
beforeEach(() => {
  stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-rollback-'));
  failWrite.on = false;
});
afterEach(() => fs.rmSync(stateDir, { recursive: true, force: true }));

describe('profile save rollback', () => {
  it('puts the bindings back when the profile write fails, and releases the lock', async () => {
    const ctx = {
      stateDir,
      floor: floorOf(configSchema.parse({ user: 'fido', network: { allow: ['github.com'] } })),
      discovery: discoverFrom(parsePasswd('fido:x:1000:1000::/:/bin/sh\nleash-iris:x:2001:2001::/:/bin/sh\n'), 'fido'),
      configuredUser: 'fido',
    };
    await saveProfile(ctx, 'web', 'network: { allow: ["github.com"] }\n', 'f', []);
    await bind(ctx, 'agent:leash-iris', 'web', []);
    const before = fs.readFileSync(bindingsFile(stateDir), 'utf8');
    failWrite.on = true;
    await expect(
      saveProfile(ctx, 'web', 'network: { allow: ["github.com", "openai.com"] }\n', 'f', [
        'agent:leash-iris=network.allow:openai.com',
      ]),
    ).rejects.toThrow(/ENOSPC/);
    expect(fs.readFileSync(bindingsFile(stateDir), 'utf8')).toBe(before);
    expect(readBindings(stateDir).bindings['agent:leash-iris']?.acks).toEqual([]);
    expect(loadProfile(stateDir, 'web')).toMatchObject({ status: 'ok', text: 'network: { allow: ["github.com"] }\n' });
    expect(fs.existsSync(`${bindingsFile(stateDir)}.lock`)).toBe(false);
    failWrite.on = false;
    await saveProfile(ctx, 'web', 'network: { allow: ["github.com", "openai.com"] }\n', 'f', [
      'agent:leash-iris=network.allow:openai.com',
    ]);
    expect(readBindings(stateDir).bindings['agent:leash-iris']?.acks).toEqual(['network.allow:openai.com']);
  });
});
