import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import { applyDir, lineDiff, readApplyDir } from '../../../../src/control/policy/apply.js';
import { ledgerFile, readBindings } from '../../../../src/control/policy/bindings.js';
import { bind, saveProfile } from '../../../../src/control/policy/commands.js';
import type { StoreContext } from '../../../../src/control/policy/consent.js';
import { floorOf } from '../../../../src/control/policy/fragment.js';
import { commitPending, pendingFile, readPending } from '../../../../src/control/policy/pending.js';
import { loadProfile } from '../../../../src/control/policy/profiles.js';
import { resolveSubject } from '../../../../src/control/policy/resolve.js';
import { loadPolicyState } from '../../../../src/control/policy/state.js';
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
const TIGHT = 'commands: { deny: ["ssh", "curl", "nc"] }\n';
const WEB = 'network: { allow: ["github.com", "openai.com"] }\n';

let ctx: StoreContext;
let dir: string;
let tmp: string;

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-apply-'));
  const stateDir = path.join(tmp, 'state');
  dir = path.join(tmp, 'dir');
  fs.mkdirSync(path.join(dir, 'profiles'), { recursive: true });
  ctx = { stateDir, floor: floorOf(floorCfg), discovery: discoverFrom(accounts, 'fido'), configuredUser: 'fido' };
});
afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

function writeDir(profiles: Record<string, string>, bindings: string): void {
  fs.rmSync(path.join(dir, 'profiles'), { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, 'profiles'));
  for (const [n, t] of Object.entries(profiles)) fs.writeFileSync(path.join(dir, 'profiles', `${n}.yaml`), t);
  fs.writeFileSync(path.join(dir, 'bindings.yaml'), bindings);
}
const apply = (dryRun = false) => applyDir(ctx, readApplyDir(dir, ctx), { dryRun });

/** Every file under the state directory: content and mtime (what "nothing written" means). */
function snapshot(): Record<string, { text: string; mtimeNs: bigint; ino: bigint }> {
  const out: Record<string, { text: string; mtimeNs: bigint; ino: bigint }> = {};
  const walk = (d: string) => {
    if (!fs.existsSync(d)) return;
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else {
        const st = fs.statSync(p, { bigint: true });
        out[path.relative(ctx.stateDir, p)] = { text: fs.readFileSync(p, 'utf8'), mtimeNs: st.mtimeNs, ino: st.ino };
      }
    }
  };
  walk(ctx.stateDir);
  return out;
}

describe('leash apply: idempotent', () => {
  it('applies a DIR, and a second apply of the same DIR reports unchanged and writes nothing', async () => {
    writeDir({ tight: TIGHT, web: WEB }, 'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n');
    const first = await apply();
    expect(first.changed).toBe(true);
    expect(first.profiles.added).toEqual(['tight', 'web']);
    expect(first.bindings.added).toEqual([{ scope: 'agent:leash-iris', profile: 'tight', acks: [] }]);
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']).toEqual({ profile: 'tight', acks: [] });
    expect(loadProfile(ctx.stateDir, 'web')).toMatchObject({ status: 'ok', text: WEB });
    const before = snapshot();
    await new Promise((r) => setTimeout(r, 20));
    const second = await apply();
    expect(second.changed).toBe(false);
    expect(snapshot()).toEqual(before);
    expect(fs.existsSync(pendingFile(ctx.stateDir))).toBe(false);
  });

  it('makes the state exactly the DIR: profiles and bindings not in it are removed', async () => {
    await saveProfile(ctx, 'old', TIGHT, 'old.yaml', []);
    await saveProfile(ctx, 'tight', TIGHT, 'tight.yaml', []);
    await bind(ctx, 'agent:leash-vader', 'old', []);
    writeDir(
      { tight: TIGHT },
      'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n  agent:leash-vader: { profile: tight }\n',
    );
    const r = await apply();
    expect(r.profiles.removed).toEqual(['old']);
    expect(r.bindings.changed.map((c) => c.scope)).toEqual(['agent:leash-vader']);
    expect(loadProfile(ctx.stateDir, 'old').status).toBe('missing');
    expect(Object.keys(readBindings(ctx.stateDir).bindings).sort()).toEqual(['agent:leash-iris', 'agent:leash-vader']);
  });
});

describe('leash apply: consent from the files', () => {
  it('refuses a loosening DIR without its acks whole: nothing changes, every missing token named', async () => {
    writeDir({ tight: TIGHT }, 'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n');
    await apply();
    const before = snapshot();
    // One tightening (vader) and one loosening (iris): the tightening is not applied either.
    writeDir(
      { tight: TIGHT, web: WEB },
      'version: 1\nbindings:\n  agent:leash-iris: { profile: web }\n  agent:leash-vader: { profile: tight }\n',
    );
    const e = await apply().then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toMatchObject({ code: 'loosening_unacknowledged', exitCode: 2 });
    expect((e as { details: { missing: string[] } }).details.missing).toEqual([
      'agent:leash-iris=network.allow:openai.com',
      'agent:leash-iris=commands.unset.deny:nc',
    ]);
    expect(snapshot()).toEqual(before);
    // The dry run refuses the same way.
    await expect(apply(true)).rejects.toMatchObject({ code: 'loosening_unacknowledged' });
  });

  it('takes a binding loosening from the binding acks and records them there', async () => {
    writeDir(
      { web: WEB },
      'version: 1\nbindings:\n  agent:leash-iris: { profile: web, acks: ["network.allow:openai.com", "network.allow:nothing.example"] }\n',
    );
    const r = await apply();
    expect(r.findings).toEqual([expect.objectContaining({ token: 'network.allow:openai.com', acked: 'binding' })]);
    expect(r.ignoredAcks).toEqual(['agent:leash-iris=network.allow:nothing.example']);
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']).toEqual({
      profile: 'web',
      acks: ['network.allow:openai.com'],
    });
    const st = loadPolicyState(floorCfg, ctx.stateDir);
    const iris = ctx.discovery.subjects.find((s) => s.account === 'leash-iris')!;
    expect(resolveSubject(iris, st)).toMatchObject({ ok: true });
  });

  it('a removed binding that loosens needs its token under acks:, and it goes to the ledger', async () => {
    writeDir({ tight: TIGHT }, 'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n');
    await apply();
    writeDir({ tight: TIGHT }, 'version: 1\nbindings: {}\n');
    await expect(apply()).rejects.toMatchObject({
      code: 'loosening_unacknowledged',
      details: { missing: ['agent:leash-iris=commands.unset.deny:nc'] },
    });
    expect(readBindings(ctx.stateDir).bindings['agent:leash-iris']).toBeDefined();
    writeDir({ tight: TIGHT }, 'version: 1\nbindings: {}\nacks:\n  agent:leash-iris: ["commands.unset.deny:nc"]\n');
    const r = await apply();
    expect(r.bindings.removed).toEqual([{ scope: 'agent:leash-iris', profile: 'tight' }]);
    const ledger = fs
      .readFileSync(ledgerFile(ctx.stateDir), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(ledger.at(-1)).toMatchObject({ op: 'apply', scope: 'agent:leash-iris', acks: ['commands.unset.deny:nc'] });
  });

  it('a dry run judges and diffs but writes nothing', async () => {
    writeDir({ tight: TIGHT }, 'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n');
    await apply();
    const before = snapshot();
    writeDir(
      { tight: 'commands: { deny: ["ssh", "curl", "nc", "wget"] }\n' },
      'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n',
    );
    const r = await apply(true);
    expect(r).toMatchObject({ changed: true, dryRun: true });
    expect(r.profiles.changed[0]!.diff).toContain('+ commands: { deny: ["ssh", "curl", "nc", "wget"] }');
    expect(snapshot()).toEqual(before);
  });
});

describe('leash apply: DIR checked whole first', () => {
  it('names a bad YAML file with its line, and every other problem, and changes nothing', () => {
    writeDir(
      { good: TIGHT, bad: 'network:\n  allow: [github.com\n', worse: 'netwrok: {}\n' },
      'version: 1\nbindings:\n  agent:leash-iris: { profile: missing }\n  team:red: { profile: good }\n',
    );
    fs.writeFileSync(path.join(dir, 'profiles', 'Notes.txt'), 'x');
    try {
      readApplyDir(dir, ctx);
      expect.unreachable();
    } catch (e) {
      expect(e).toMatchObject({ code: 'apply_invalid' });
      const issues = (e as { details: { issues: { file: string; path: string; code: string }[] } }).details.issues;
      const byFile = (f: string) => issues.filter((i) => i.file.endsWith(f));
      expect(byFile('bad.yaml')[0]).toMatchObject({
        code: 'config_syntax',
        path: expect.stringMatching(/line \d+, column \d+/),
      });
      expect(byFile('worse.yaml')[0]).toMatchObject({
        code: 'config_invalid',
        path: expect.stringContaining('netwrok'),
      });
      expect(byFile('Notes.txt')[0]).toMatchObject({ code: 'profile_name_invalid' });
      expect(
        byFile('bindings.yaml')
          .map((i) => i.code)
          .sort(),
      ).toEqual(['profile_not_found', 'scope_invalid']);
    }
  });

  it('refuses a DIR without bindings.yaml, and a binding to the configured user', async () => {
    expect(() => readApplyDir(dir, ctx)).toThrow(expect.objectContaining({ code: 'apply_invalid' }));
    writeDir({ tight: TIGHT }, 'version: 1\nbindings:\n  agent:fido: { profile: tight }\n');
    await expect(apply()).rejects.toMatchObject({ code: 'scope_invalid' });
  });

  it('ignores dot entries (a ConfigMap volume keeps ..data links there) and follows symlinked files', async () => {
    const data = path.join(dir, '..2026_12_02');
    fs.mkdirSync(path.join(data, 'profiles'), { recursive: true });
    fs.writeFileSync(path.join(data, 'profiles', 'tight.yaml'), TIGHT);
    fs.writeFileSync(
      path.join(data, 'bindings.yaml'),
      'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n',
    );
    fs.symlinkSync('..2026_12_02', path.join(dir, '..data'));
    fs.rmSync(path.join(dir, 'profiles'), { recursive: true });
    fs.symlinkSync('..data/profiles', path.join(dir, 'profiles'));
    fs.symlinkSync('..data/bindings.yaml', path.join(dir, 'bindings.yaml'));
    const r = await apply();
    expect(r.profiles.added).toEqual(['tight']);
  });
});

describe('leash apply: the commit record', () => {
  it('while a commit record exists the state read is the target, and the next writer finishes it', async () => {
    await saveProfile(ctx, 'tight', TIGHT, 'tight.yaml', []);
    // A crash right after the commit point: the record is there, no file has been written yet.
    commitPending(ctx.stateDir, {
      version: 1,
      profiles: { tight: TIGHT, web: WEB },
      bindings: 'version: 1\nbindings:\n  agent:leash-vader: { profile: tight, acks: [] }\n',
    });
    const st = loadPolicyState(floorCfg, ctx.stateDir);
    expect(st.bindings.bindings['agent:leash-vader']).toEqual({ profile: 'tight', acks: [] });
    expect(st.profile('web').status).toBe('ok');
    expect(loadProfile(ctx.stateDir, 'web').status).toBe('missing');
    await saveProfile(ctx, 'other', TIGHT, 'other.yaml', []);
    expect(readPending(ctx.stateDir)).toBeNull();
    expect(loadProfile(ctx.stateDir, 'web').status).toBe('ok');
    expect(readBindings(ctx.stateDir).bindings['agent:leash-vader']).toEqual({ profile: 'tight', acks: [] });
  });
});

describe('lineDiff', () => {
  it('marks removed and added lines', () => {
    expect(lineDiff('a\nb\nc\n', 'a\nc\nd\n')).toEqual(['  a', '- b', '  c', '+ d']);
  });
});
