import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import { toPolicyInput } from '../../../../src/control/config/policy-input.js';
import { compilePolicy, decide, decideDnsName } from '../../../../src/engine/index.js';
import { readBindings } from '../../../../src/control/policy/bindings.js';
import { bind, saveProfile } from '../../../../src/control/policy/commands.js';
import type { StoreContext } from '../../../../src/control/policy/consent.js';
import { floorOf } from '../../../../src/control/policy/fragment.js';
import { loadPolicyState } from '../../../../src/control/policy/state.js';
import { resolveSubject } from '../../../../src/control/policy/resolve.js';
import { fsCmdPolicyOf } from '../../../../src/dataplane/watcher/policy.js';
import { discoverFrom, parsePasswd } from '../../../../src/control/subjects/discovery.js';

const PASSWD = `root:x:0:0:root:/root:/bin/bash
fido:x:1000:1000:Fido:/home/fido:/bin/bash
leash-iris:x:2001:2001:Iris,,,:/home/leash-iris:/bin/sh
`;
const accounts = parsePasswd(PASSWD);
const floorCfg = configSchema.parse({
  user: 'fido',
  network: { mode: 'whitelist', allow: ['github.com'] },
  filesystem: { mode: 'whitelist', allow: ['/work'] },
});
let ctx: StoreContext;
beforeEach(() => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-shadow-'));
  ctx = { stateDir, floor: floorOf(floorCfg), discovery: discoverFrom(accounts, 'fido'), configuredUser: 'fido' };
});
afterEach(() => fs.rmSync(ctx.stateDir, { recursive: true, force: true }));

const iris = { kind: 'agent' as const, account: 'leash-iris', uid: 2001 };
const fido = { kind: 'user' as const, account: 'fido', uid: 1000 };
const STRICT = 'network: { allow: [] }\n';

describe('shadow mode: consent of the mode switch', () => {
  it('enforce -> shadow on a binding is a loosening that needs its ack; the binding records it', async () => {
    await saveProfile(ctx, 'strict', STRICT, 'strict.yaml', []);
    await bind(ctx, 'agent:leash-iris', 'strict', []);
    await expect(bind(ctx, 'agent:leash-iris', 'strict', [], 'shadow')).rejects.toMatchObject({
      code: 'loosening_unacknowledged',
      details: { missing: ['enforce:shadow'] },
    });
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']?.enforce).toBeUndefined();
    const r = await bind(ctx, 'agent:leash-iris', 'strict', ['enforce:shadow'], 'shadow');
    expect(r.enforce).toBe('shadow');
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']).toMatchObject({
      enforce: 'shadow',
      acks: ['enforce:shadow'],
    });
  });

  it('shadow -> enforce needs no ack', async () => {
    await saveProfile(ctx, 'strict', STRICT, 'strict.yaml', []);
    await bind(ctx, 'agent:leash-iris', 'strict', ['enforce:shadow'], 'shadow');
    const r = await bind(ctx, 'agent:leash-iris', 'strict', [], 'enforce');
    expect(r.findings.map((f) => f.token)).toEqual([]);
    expect(r.enforce).toBe('enforce');
  });

  it('a profile that sets enforce: shadow needs the same ack to be bound', async () => {
    await saveProfile(ctx, 'try', `enforce: shadow\n${STRICT}`, 'try.yaml', []);
    await expect(bind(ctx, 'agent:leash-iris', 'try', [])).rejects.toMatchObject({
      code: 'loosening_unacknowledged',
      details: { missing: ['enforce:shadow'] },
    });
  });

  it("the binding's enforce wins over the profile's", async () => {
    await saveProfile(ctx, 'try', `enforce: shadow\n${STRICT}`, 'try.yaml', []);
    await bind(ctx, 'agent:leash-iris', 'try', [], 'enforce');
    const st = loadPolicyState(floorCfg, ctx.stateDir);
    const r = resolveSubject(iris, st);
    expect(r.ok && r.policy.enforce).toBe('enforce');
  });

  it('the configured user is never in shadow, even under a global shadow binding', async () => {
    await saveProfile(ctx, 'g', 'fail_mode: closed\n', 'g.yaml', []);
    await bind(ctx, 'global', 'g', ['enforce:shadow'], 'shadow');
    const st = loadPolicyState(floorCfg, ctx.stateDir);
    const u = resolveSubject(fido, st);
    const a = resolveSubject(iris, st);
    expect(u.ok && u.policy.enforce).toBe('enforce');
    expect(a.ok && a.policy.enforce).toBe('shadow');
  });
});

describe('shadow mode: verdicts', () => {
  const shadowPolicy = { ...floorOf(floorCfg), enforce: 'shadow' as const };
  it('a block becomes an allow marked wouldBlock with the block reason and rule; allows are unchanged', () => {
    const p = compilePolicy(
      toPolicyInput({ ...shadowPolicy, network: { ...shadowPolicy.network, deny: ['evil.lab'] } }),
    );
    expect(decide('network', { domain: 'evil.lab', ip: null, port: 443 }, p)).toMatchObject({
      action: 'allow',
      wouldBlock: true,
      reason: 'deny_entry',
      rule: 'evil.lab',
    });
    expect(decide('network', { domain: 'other.lab', port: 443 }, p)).toMatchObject({
      action: 'allow',
      wouldBlock: true,
      reason: 'not_allowed',
    });
    const ok = decide('network', { domain: 'github.com', port: 443 }, p);
    expect(ok.action).toBe('allow');
    expect(ok.wouldBlock).toBeUndefined();
    expect(decideDnsName('other.lab', p)).toMatchObject({ action: 'allow', wouldBlock: true, reason: 'not_allowed' });
  });
  it('an enforced policy still blocks', () => {
    const p = compilePolicy(toPolicyInput(floorOf(floorCfg)));
    expect(decide('filesystem', { path: '/etc/shadow' }, p)).toMatchObject({ action: 'block', reason: 'not_allowed' });
  });
  it('the watcher policy carries shadow only in shadow mode', () => {
    expect(fsCmdPolicyOf(shadowPolicy).shadow).toBe(true);
    expect(fsCmdPolicyOf(floorOf(floorCfg)).shadow).toBeUndefined();
  });
});
