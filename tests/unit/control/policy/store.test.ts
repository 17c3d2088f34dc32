import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import { ledgerFile, parseScope, readBindings } from '../../../../src/control/policy/bindings.js';
import { bind, deleteProfile, saveProfile, unbind } from '../../../../src/control/policy/commands.js';
import type { StoreContext } from '../../../../src/control/policy/consent.js';
import { floorOf } from '../../../../src/control/policy/fragment.js';
import { loadProfile, parseProfileText } from '../../../../src/control/policy/profiles.js';
import { validateStore } from '../../../../src/control/policy/validate.js';
import { discoverFrom, parsePasswd } from '../../../../src/control/subjects/discovery.js';

const PASSWD = `root:x:0:0:root:/root:/bin/bash
fido:x:1000:1000:Fido:/home/fido:/bin/bash
leash-iris:x:2001:2001:Iris,,,:/home/leash-iris:/bin/sh
leash-vader:x:2002:2002:Darth Vader:/home/leash-vader:/bin/sh
`;
const accounts = parsePasswd(PASSWD);
const floorCfg = configSchema.parse({
  user: 'fido',
  network: { mode: 'whitelist', allow: ['github.com'] },
  commands: { mode: 'blacklist', deny: ['ssh', 'curl'] },
});
let ctx: StoreContext;

beforeEach(() => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-store-'));
  ctx = { stateDir, floor: floorOf(floorCfg), discovery: discoverFrom(accounts, 'fido'), configuredUser: 'fido' };
});
afterEach(() => fs.rmSync(ctx.stateDir, { recursive: true, force: true }));

const WEB = 'network: { allow: ["github.com", "openai.com"] }\n';
const TIGHT = 'commands: { deny: ["ssh", "curl", "nc"] }\n';

describe('scopes', () => {
  it('accepts global and agent:<leash account>', () => {
    expect(parseScope('global', accounts, 'fido')).toBe('global');
    expect(parseScope('agent:leash-iris', accounts, 'fido')).toBe('agent:leash-iris');
  });
  it.each([
    ['agent:Iris', 'scope_unknown_account', ['leash-iris']],
    ['agent:IRIS', 'scope_unknown_account', ['leash-iris']],
    ['agent:Darth Vader', 'scope_unknown_account', ['leash-vader']],
    ['agent:nobody', 'scope_unknown_account', []],
    ['agent:fido', 'scope_invalid', undefined],
    ['agent:root', 'scope_invalid', undefined],
    ['team:red', 'scope_invalid', undefined],
  ])('refuses %s, naming the real account when there is one', (scope, code, suggestions) => {
    try {
      parseScope(scope, accounts, 'fido');
      expect.unreachable();
    } catch (e) {
      expect(e).toMatchObject({ code });
      if (suggestions) expect((e as { details: { suggestions: string[] } }).details.suggestions).toEqual(suggestions);
    }
  });
});

describe('profiles', () => {
  it('refuses user and logging keys, unknown keys and fail_mode typos', () => {
    for (const text of ['user: root\n', 'logging: { decisions: stdout }\n', 'netwrok: {}\n', 'fail_mode: opne\n']) {
      expect(() => parseProfileText(text, 'p.yaml')).toThrow(expect.objectContaining({ code: 'profile_invalid' }));
    }
  });
  it('refuses inert entries on write and writes nothing', async () => {
    await expect(
      saveProfile(ctx, 'p', 'filesystem: { deny: ["relative/path"] }\n', 'p.yaml', []),
    ).rejects.toMatchObject({
      code: 'profile_inert_entry',
    });
    await expect(saveProfile(ctx, 'p', 'commands: { allow: ["git"] }\n', 'p.yaml', [])).rejects.toMatchObject({
      code: 'profile_inert_entry',
    });
    expect(loadProfile(ctx.stateDir, 'p').status).toBe('missing');
  });
  it('validates names', async () => {
    for (const n of ['../x', 'Web', '.hidden', 'a/b', '']) {
      await expect(saveProfile(ctx, n, WEB, 'f', [])).rejects.toMatchObject({ code: 'profile_name_invalid' });
    }
  });
});

describe('bind', () => {
  it('refuses a loosening listing every token, and accepts it with them', async () => {
    await saveProfile(
      ctx,
      'wide',
      'network: { allow: ["github.com", "openai.com"] }\ncommands: { deny: [] }\n',
      'f',
      [],
    );
    const err = await bind(ctx, 'agent:leash-iris', 'wide', []).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'loosening_unacknowledged' });
    const missing = (err as { details: { missing: string[] } }).details.missing;
    expect(missing.sort()).toEqual(['commands.unset.deny:curl', 'commands.unset.deny:ssh', 'network.allow:openai.com']);
    await expect(bind(ctx, 'agent:leash-iris', 'wide', missing.slice(1))).rejects.toMatchObject({
      code: 'loosening_unacknowledged',
    });
    expect(readBindings(ctx.stateDir).bindings).toEqual({});
    const r = await bind(ctx, 'agent:leash-iris', 'wide', missing);
    expect(r.acks.sort()).toEqual(missing);
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']).toEqual({ profile: 'wide', acks: r.acks });
  });

  it('a re-bind of the same profile keeps the consent already on the binding', async () => {
    await saveProfile(ctx, 'web', WEB, 'f', []);
    await bind(ctx, 'agent:leash-iris', 'web', ['network.allow:openai.com']);
    const r = await bind(ctx, 'agent:leash-iris', 'web', []);
    expect(r.acks).toEqual(['network.allow:openai.com']);
    await saveProfile(ctx, 'web2', WEB, 'f', []);
    await expect(bind(ctx, 'agent:leash-iris', 'web2', [])).rejects.toMatchObject({ code: 'loosening_unacknowledged' });
  });

  it('lets a profile tighten freely', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    await bind(ctx, 'agent:leash-iris', 'tight', []);
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']?.acks).toEqual([]);
  });

  it('judges global against the unfolded floor', async () => {
    await saveProfile(ctx, 'open', 'fail_mode: open\nnetwork: { mode: blacklist }\n', 'f', []);
    const err = await bind(ctx, 'global', 'open', []).catch((e: unknown) => e);
    expect((err as { details: { missing: string[] } }).details.missing).toEqual([
      'fail_mode:open',
      'network.mode:blacklist',
    ]);
  });

  it('refuses a rebind that drops what the old profile tightened, unless acked (ledgered)', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    await saveProfile(ctx, 'empty', '{}\n', 'f', []);
    await bind(ctx, 'agent:leash-iris', 'tight', []);
    await expect(bind(ctx, 'agent:leash-iris', 'empty', [])).rejects.toMatchObject({
      code: 'loosening_unacknowledged',
      details: expect.objectContaining({ missing: ['commands.unset.deny:nc'] }),
    });
    await bind(ctx, 'agent:leash-iris', 'empty', ['commands.unset.deny:nc']);
    const ledger = fs
      .readFileSync(ledgerFile(ctx.stateDir), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(ledger).toEqual([
      expect.objectContaining({ op: 'rebind', scope: 'agent:leash-iris', acks: ['commands.unset.deny:nc'] }),
    ]);
  });

  it('re-checks under the lock that the profile it judged is still the one on disk', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    const lock = `${path.join(ctx.stateDir, 'bindings.yaml')}.lock`;
    fs.writeFileSync(lock, `${process.pid}\n`); // a live writer holds the lock
    const pending = bind(ctx, 'agent:leash-iris', 'tight', []).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 100));
    // Swapped on disk behind bind's back (as another writer would, under the lock).
    fs.writeFileSync(path.join(ctx.stateDir, 'profiles/tight.yaml'), 'fail_mode: open\n');
    fs.rmSync(lock);
    expect(await pending).toMatchObject({ code: 'profile_changed' });
    expect(readBindings(ctx.stateDir).bindings).toEqual({});
  });

  it('refuses when the profile does not exist', async () => {
    await expect(bind(ctx, 'agent:leash-iris', 'nope', [])).rejects.toMatchObject({ code: 'profile_not_found' });
  });
});

describe('unbind', () => {
  it('judges the removal: dropping a tightening profile loosens and needs consent, ledgered before removal', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    await bind(ctx, 'agent:leash-iris', 'tight', []);
    await expect(unbind(ctx, 'agent:leash-iris', [])).rejects.toMatchObject({
      code: 'loosening_unacknowledged',
      details: expect.objectContaining({ missing: ['commands.unset.deny:nc'] }),
    });
    expect(fs.existsSync(ledgerFile(ctx.stateDir))).toBe(false);
    await unbind(ctx, 'agent:leash-iris', ['commands.unset.deny:nc']);
    expect(readBindings(ctx.stateDir).bindings).toEqual({});
    const rec = JSON.parse(fs.readFileSync(ledgerFile(ctx.stateDir), 'utf8').trim()) as Record<string, unknown>;
    expect(rec).toMatchObject({
      op: 'unbind',
      scope: 'agent:leash-iris',
      profile: 'tight',
      acks: ['commands.unset.deny:nc'],
    });
  });

  it('a dangling binding needs fail_closed:<profile> to be removed', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    await bind(ctx, 'agent:leash-iris', 'tight', []);
    const d = await deleteProfile(ctx, 'tight');
    expect(d.dangling).toEqual(['agent:leash-iris']);
    expect(d.impact.map((i) => i.account)).toEqual(['leash-iris']);
    await expect(unbind(ctx, 'agent:leash-iris', [])).rejects.toMatchObject({
      details: expect.objectContaining({ missing: ['fail_closed:tight'] }),
    });
    await unbind(ctx, 'agent:leash-iris', ['fail_closed:tight']);
    expect(readBindings(ctx.stateDir).bindings).toEqual({});
  });

  it('does not remove the binding when the ledger cannot be written', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    await bind(ctx, 'agent:leash-iris', 'tight', []);
    fs.mkdirSync(ledgerFile(ctx.stateDir)); // a directory where the ledger should be: open(O_APPEND) fails
    await expect(unbind(ctx, 'agent:leash-iris', ['commands.unset.deny:nc'])).rejects.toMatchObject({
      code: 'ledger_unwritable',
    });
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']?.profile).toBe('tight');
  });

  it('refuses an unbind it cannot judge: the subject is still unresolvable without the binding', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    await saveProfile(ctx, 'g', TIGHT, 'f', []);
    await bind(ctx, 'agent:leash-iris', 'tight', []);
    await bind(ctx, 'global', 'g', []);
    await deleteProfile(ctx, 'g'); // the global binding dangles: every subject is held fail-closed
    await expect(unbind(ctx, 'agent:leash-iris', ['commands.unset.deny:nc'])).rejects.toMatchObject({
      code: 'policy_unjudgeable',
    });
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']?.profile).toBe('tight');
  });

  it('a global change is not blocked by an agent its own binding holds fail-closed', async () => {
    await saveProfile(ctx, 'gone', TIGHT, 'f', []);
    await saveProfile(ctx, 'g', TIGHT, 'f', []);
    await bind(ctx, 'agent:leash-vader', 'gone', []);
    await deleteProfile(ctx, 'gone');
    const r = await bind(ctx, 'global', 'g', []);
    expect(r.impact.map((i) => `${i.account}:${i.failure.code}`)).toEqual(['leash-vader:dangling_profile']);
  });

  it('unbinding a narrowing global judges every subject', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'f', []);
    await bind(ctx, 'global', 'tight', []);
    await expect(unbind(ctx, 'global', [])).rejects.toMatchObject({
      details: expect.objectContaining({ missing: ['commands.unset.deny:nc'] }),
    });
  });
});

describe('profile edit re-judges every binding that names it', () => {
  it('refuses a loosening edit naming each agent, and takes per-agent consent onto that binding only', async () => {
    await saveProfile(ctx, 'web', 'network: { allow: ["github.com"] }\n', 'f', []);
    await bind(ctx, 'agent:leash-iris', 'web', []);
    await bind(ctx, 'agent:leash-vader', 'web', []);
    const err = await saveProfile(ctx, 'web', WEB, 'f', []).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'loosening_unacknowledged' });
    expect((err as { details: { missing: string[] } }).details.missing).toEqual([
      'agent:leash-iris=network.allow:openai.com',
      'agent:leash-vader=network.allow:openai.com',
    ]);
    await expect(
      saveProfile(ctx, 'web', WEB, 'f', ['agent:leash-iris=network.allow:openai.com']),
    ).rejects.toMatchObject({
      details: expect.objectContaining({ missing: ['agent:leash-vader=network.allow:openai.com'] }),
    });
    expect(loadProfile(ctx.stateDir, 'web').status === 'ok' && loadProfile(ctx.stateDir, 'web')).toMatchObject({
      text: 'network: { allow: ["github.com"] }\n',
    });
    const r = await saveProfile(ctx, 'web', WEB, 'f', [
      'agent:leash-iris=network.allow:openai.com',
      'agent:leash-vader=network.allow:openai.com',
    ]);
    expect(r.acksAdded).toEqual({
      'leash-iris': ['network.allow:openai.com'],
      'leash-vader': ['network.allow:openai.com'],
    });
    const b = readBindings(ctx.stateDir).bindings;
    expect(b['agent:leash-iris']?.acks).toEqual(['network.allow:openai.com']);
    expect(b['agent:leash-vader']?.acks).toEqual(['network.allow:openai.com']);
  });

  it('refuses plain tokens and agents not bound to the profile', async () => {
    await saveProfile(ctx, 'web', WEB.replace(', "openai.com"', ''), 'f', []);
    await bind(ctx, 'agent:leash-iris', 'web', []);
    await expect(saveProfile(ctx, 'web', WEB, 'f', ['network.allow:openai.com'])).rejects.toMatchObject({
      code: 'ack_invalid',
    });
    await expect(
      saveProfile(ctx, 'web', WEB, 'f', ['agent:leash-vader=network.allow:openai.com']),
    ).rejects.toMatchObject({ code: 'ack_invalid' });
  });

  it('never takes consent for global through an edit', async () => {
    await saveProfile(ctx, 'g', TIGHT, 'f', []);
    await bind(ctx, 'global', 'g', []);
    await expect(saveProfile(ctx, 'g', 'fail_mode: open\n', 'f', [])).rejects.toMatchObject({
      code: 'loosening_unacknowledged',
      details: expect.objectContaining({ global: true }),
    });
  });
});

describe('leash validate (store part)', () => {
  it('reports stale acks, dangling bindings, bindings for nobody, inert entries and unresolvable subjects', async () => {
    await saveProfile(ctx, 'web', WEB, 'f', []);
    await bind(ctx, 'agent:leash-iris', 'web', ['network.allow:openai.com']);
    // The profile is edited to tighten: the ack now consents to nothing.
    await saveProfile(ctx, 'web', 'network: { allow: ["github.com"] }\n', 'f', []);
    fs.writeFileSync(path.join(ctx.stateDir, 'profiles', 'inert.yaml'), 'filesystem: { deny: ["not/absolute"] }\n');
    fs.writeFileSync(
      path.join(ctx.stateDir, 'bindings.yaml'),
      fs.readFileSync(path.join(ctx.stateDir, 'bindings.yaml'), 'utf8') +
        '  agent:leash-gone:\n    profile: web\n    acks: []\n  agent:leash-vader:\n    profile: deleted\n    acks: []\n',
    );
    const f = validateStore(ctx.stateDir, ctx.floor, ctx.discovery);
    const codes = f.map((x) => `${x.code}@${x.path}`);
    expect(codes).toContain('inert_deny@profiles/inert.yaml:filesystem.deny[0]');
    expect(codes).toContain('ack_stale@bindings.yaml:agent:leash-iris');
    expect(codes).toContain('binding_for_nobody@bindings.yaml:agent:leash-gone');
    expect(codes).toContain('binding_dangling@bindings.yaml:agent:leash-vader');
    expect(codes).toContain('subject_unresolvable@subject:leash-vader');
    expect(f[0]?.severity).toBe('critical');
  });

  it('reports nothing for a host with no state directory', () => {
    expect(validateStore(path.join(ctx.stateDir, 'none'), ctx.floor, ctx.discovery)).toEqual([]);
  });
});
