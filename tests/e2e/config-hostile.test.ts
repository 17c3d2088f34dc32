/**
 * The bad-input sweep's reproducers (issue 13) through the real CLI: every config problem is exit 2
 * with a catalogue code (JSON on stdout under --json), never exit 70 or a stack trace; a catastrophic
 * pattern is harmless to `leash check tool` and one that cannot be matched in linear time is refused
 * at write and at load; look-alike entries and an unusable decision sink are refused by validate.
 * Plus a few hundred generated configs (tests/fixtures/config-fuzz.ts) through `leash validate`.
 */
import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { generateConfigBytes } from '../fixtures/config-fuzz.js';
import { configFile, ensureBuilt, leash, tmpDir } from './helpers.js';

beforeAll(() => ensureBuilt(), 120_000);

const noStack = (s: string) => expect(s).not.toMatch(/\n\s+at .+:\d+:\d+/);

async function validateJson(text: string | Buffer) {
  const file = path.join(tmpDir(), 'leash.yaml');
  fs.writeFileSync(file, text);
  const r = await leash(['-c', file, 'validate', '--json']);
  noStack(r.stderr);
  return { code: r.code, json: JSON.parse(r.stdout) as Record<string, unknown> };
}

describe('leash validate on hostile YAML', () => {
  it.each([
    ['an alias used as a key', 'user: nobody\nnetwork:\n  &k mode: whitelist\n  *k : blacklist\n', 'config_alias'],
    ['an undefined alias (was exit 70, nothing on stdout)', 'user: nobody\nnetwork:\n  deny: [*x]\n', 'config_alias'],
    [
      '150 aliases (was exit 70)',
      `user: nobody\na: &a [x]\nb: [${Array.from({ length: 150 }, () => '*a').join(', ')}]\n`,
      'config_alias',
    ],
    [
      'a %YAML 1.1 merge key',
      '%YAML 1.1\n---\nuser: nobody\nb: &x {udp: allow}\nnetwork:\n  <<: *x\n',
      'config_yaml_version',
    ],
    ['a merge key', 'user: nobody\nnetwork:\n  <<: {mode: blacklist}\n', 'config_alias'],
    ['!!python/object', 'user: nobody\ntools:\n  deny: [!!python/object:os.system shell]\n', 'config_tag'],
    ['an over-long entry', `user: nobody\ntools:\n  deny: ["${'a'.repeat(5000)}"]\n`, 'entry_too_long'],
    ['a decisions sink at /', 'user: nobody\nlogging:\n  decisions: /\n', 'config_invalid'],
  ])('%s: exit 2, %s, JSON on stdout', async (_w, text, code) => {
    const { code: exit, json } = await validateJson(text);
    expect(exit).toBe(2);
    expect(json).toMatchObject({ valid: false, error: { code } });
  });

  it('invalid UTF-8: exit 2 config_encoding', async () => {
    const { code, json } = await validateJson(
      Buffer.from([
        ...Buffer.from('user: nobody\nfilesystem:\n  deny: ["/etc/sh'),
        0xe0,
        0x41,
        ...Buffer.from('dow"]\n'),
      ]),
    );
    expect(code).toBe(2);
    expect(json).toMatchObject({ error: { code: 'config_encoding' } });
  });

  it('a 12 MB tools entry is refused at once (config_too_large), not after 25 s and 1.9 GB', async () => {
    const { code, json } = await validateJson(`user: nobody\ntools:\n  deny: ["${'a'.repeat(12_000_000)}"]\n`);
    expect(code).toBe(2);
    expect(json).toMatchObject({ error: { code: 'config_too_large' } });
  });

  it('a lookalike deny entry is critical (exit 1, entry_lookalike naming U+0430)', async () => {
    const { code, json } = await validateJson('user: nobody\nfilesystem:\n  deny: ["/etc/sh\u0430dow"]\n');
    expect(code).toBe(1);
    const f = (json.findings as { code: string; message: string }[]).find((x) => x.code === 'entry_lookalike');
    expect(f?.message).toContain('U+0430');
  });

  it.each([
    ['/etc/passwd', 'decisions_sink_unusable'],
    ['/tmp', 'decisions_sink_unusable'],
  ])('a decisions sink at %s is refused by validate (exit 1, %s)', async (sink, code) => {
    const { code: exit, json } = await validateJson(`user: nobody\nlogging:\n  decisions: ${sink}\n`);
    expect(exit).toBe(1);
    expect((json.findings as { code: string }[]).map((f) => f.code)).toContain(code);
  });
});

describe('writes refuse what validate would', () => {
  it('leash fs deny with a Cyrillic а: exit 2 entry_lookalike, file unchanged', async () => {
    const file = configFile('user: nobody\nfilesystem:\n  deny: [/etc/shadow]\n');
    const before = fs.readFileSync(file, 'utf8');
    const r = await leash(['-c', file, 'fs', 'deny', '/etc/sh\u0430dow', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout)).toMatchObject({
      error: { code: 'entry_lookalike', details: { code_point: 'U+0430' } },
    });
    expect(fs.readFileSync(file, 'utf8')).toBe(before);
  });

  it('leash tools deny "*": exit 2 entry_inert', async () => {
    const file = configFile('user: nobody\n');
    const r = await leash(['-c', file, 'tools', 'deny', '*', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout)).toMatchObject({ error: { code: 'entry_inert' } });
  });
});

describe('argument patterns: linear matching', () => {
  const POLICY = (pattern: string) =>
    `user: nobody\ntools:\n  allow: [run]\n  inspect: {secrets: allow, pii: allow, priv_esc: allow}\n  args:\n    run:\n      deny:\n        cmd: [${JSON.stringify(pattern)}]\n`;

  it('(a+)+$ against 33 characters and against 100,000: leash check tool answers at once', async () => {
    const file = configFile(POLICY('(a+)+$'));
    for (const n of [33, 100_000]) {
      const t0 = Date.now();
      const r = await leash([
        '-c',
        file,
        'check',
        'tool',
        'run',
        '--inputs',
        JSON.stringify({ cmd: `${'a'.repeat(n)}!` }),
        '--json',
      ]);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ action: 'allow' });
      // A backtracking engine takes 2^n steps here (20 s and more at n = 33); the bound is startup.
      expect(Date.now() - t0).toBeLessThan(15_000);
    }
    const d = await leash(['-c', file, 'check', 'tool', 'run', '--inputs', '{"cmd":"aaa"}', '--json']);
    expect(JSON.parse(d.stdout)).toMatchObject({ action: 'block', reason: 'arg_denied' });
  });

  it('a pattern that cannot be matched in linear time is refused at load (validate exit 2)', async () => {
    const { code, json } = await validateJson(POLICY('(a)\\1'));
    expect(code).toBe(2);
    expect(json).toMatchObject({ error: { code: 'config_invalid' } });
  });

  it('and at write (leash profile save: exit 2 profile_invalid, nothing stored)', async () => {
    const dir = tmpDir();
    fs.writeFileSync(path.join(dir, 'passwd'), 'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n');
    const cfg = path.join(dir, 'leash.yaml');
    fs.writeFileSync(cfg, 'user: nobody\n');
    const frag = path.join(dir, 'frag.yaml');
    fs.writeFileSync(frag, 'tools:\n  args:\n    run:\n      deny:\n        cmd: ["x(?=y)"]\n');
    const env = {
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PID_FILE: path.join(dir, 'pid'),
    };
    const r = await leash(['-c', cfg, 'profile', 'save', 'web', '--from', frag, '--json'], { env });
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout)).toMatchObject({ error: { code: 'profile_invalid' } });
    expect(fs.existsSync(path.join(dir, 'state', 'profiles', 'web.yaml'))).toBe(false);
    noStack(r.stderr);
  });
});

describe('generated configs through the CLI', () => {
  const CASES = Number(process.env.LEASH_FUZZ_CLI_CASES ?? 60);
  const SEED = 4242;

  it(`${CASES} generated files (seed ${SEED}): exit 0, 1 or 2 with JSON on stdout, no stack trace`, async () => {
    const dir = tmpDir();
    const seen = new Map<number, number>();
    const one = async (i: number) => {
      const file = path.join(dir, `c${i}.yaml`);
      fs.writeFileSync(file, generateConfigBytes(SEED, i));
      const r = await leash(['-c', file, 'validate', '--json']);
      noStack(r.stderr);
      expect([0, 1, 2], `case ${i}: exit ${r.code}\n${r.stderr}`).toContain(r.code);
      const j = JSON.parse(r.stdout) as { valid: boolean; error?: { code: string } };
      expect(typeof j.valid).toBe('boolean');
      if (r.code === 2) expect(j.error?.code).toMatch(/^[a-z_]+$/);
      seen.set(r.code!, (seen.get(r.code!) ?? 0) + 1);
    };
    for (let i = 0; i < CASES; i += 4)
      await Promise.all([0, 1, 2, 3].filter((k) => i + k < CASES).map((k) => one(i + k)));
    expect(seen.get(2) ?? 0).toBeGreaterThan(0);
    expect((seen.get(0) ?? 0) + (seen.get(1) ?? 0)).toBeGreaterThan(0);
  }, 600_000);
});
