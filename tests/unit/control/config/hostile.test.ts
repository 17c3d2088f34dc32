/**
 * The bad-input sweep's reproducers (issue 13): a policy file means exactly what it says, every
 * problem is a LeashError with its own code (exit 2), and hostile sizes are refused in bounded
 * time and memory. Every policy-file loader goes through the same strict reader.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { loadConfig, parseConfig, parseFragment } from '../../../../src/control/config/load.js';
import { sinkProblem } from '../../../../src/control/config/sink.js';
import { addEntry, editConfig } from '../../../../src/control/config/write.js';
import {
  MAX_DEPTH,
  MAX_ENTRY_CHARS,
  MAX_FILE_BYTES,
  MAX_LIST_ITEMS,
  parseStrictYaml,
} from '../../../../src/formats/yaml.js';
import { GatePolicyError } from '../../../../src/tools/judge/compile.js';
import { loadGatePolicyFile } from '../../../../src/tools/judge/policy-file.js';
import { loadTerminalPolicy, TerminalPolicyError } from '../../../../src/tools/terminal/policy-file.js';
import { networkEntryProblem } from '../../../../src/engine/index.js';
import { EXIT, LeashError } from '../../../../src/errors.js';
import { loadProfile } from '../../../../src/control/policy/profiles.js';

const lookup = () => null;

function codeOf(text: string, fragment = false): string {
  try {
    if (fragment) parseFragment(text, 't.yaml');
    else parseConfig(text, 't.yaml', { lookup });
  } catch (e) {
    if (e instanceof LeashError) {
      expect(e.exitCode).toBe(EXIT.refused);
      return e.code;
    }
    throw e;
  }
  return 'accepted';
}

function tmpFile(content: string | Buffer, name = 'p.yaml'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-hostile-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  const f = path.join(dir, name);
  fs.writeFileSync(f, content);
  return f;
}

describe('YAML that means what it says', () => {
  it.each([
    ['an alias used as a key (the duplicate-key bypass)', 'network:\n  &k mode: whitelist\n  *k : blacklist\n'],
    ['an alias as a value', 'x: &a blacklist\n'],
    ['an alias list entry', 'network:\n  deny: [&a evil.com, *a]\n'],
    ['an undefined alias (was exit 70)', 'network:\n  deny: [*nowhere]\n'],
    ['a merge key', 'network:\n  <<: {mode: blacklist}\n'],
    ['a merge key from an anchor', 'base: &b {mode: blacklist}\nnetwork:\n  <<: *b\n'],
    [
      'a billion-laughs document (100 and more aliases, was exit 70)',
      `a: &a [x]\nb: [${Array.from({ length: 150 }, () => '*a').join(', ')}]\n`,
    ],
  ])('%s is config_alias', (_what, text) => {
    expect(codeOf(text)).toBe('config_alias');
    expect(codeOf(text, true)).toBe('config_alias');
  });

  it('the alias-key trick does not validate (and the plain spelling is a duplicate key)', () => {
    expect(codeOf('network:\n  mode: whitelist\n  mode: blacklist\n')).toBe('config_invalid');
  });

  it.each([
    ['%YAML 1.1 with a merge key', '%YAML 1.1\n---\nb: &x {udp: allow}\nnetwork:\n  <<: *x\n'],
    ['%YAML 1.1 alone (n: reads as false)', '%YAML 1.1\n---\nuser: null\n'],
  ])('%s is config_yaml_version', (_w, text) => {
    expect(codeOf(text)).toBe('config_yaml_version');
  });

  it('%YAML 1.2 is read', () => {
    expect(codeOf('%YAML 1.2\n---\nuser: null\n')).toBe('accepted');
  });

  it.each([
    ['!!python/object (was silently dropped)', 'tools:\n  deny: [!!python/object:os.system x]\n'],
    ['a local tag', 'network:\n  mode: !foo blacklist\n'],
    ['a core tag', 'network:\n  deny: [!!str evil.com]\n'],
    ['a tag on a mapping', 'network: !!map {mode: whitelist}\n'],
    ['a %TAG directive', '%TAG !e! tag:example.com,2000:\n---\nuser: null\n'],
  ])('%s is config_tag', (_w, text) => {
    expect(codeOf(text)).toBe('config_tag');
  });

  it('the issue names the anchor, alias and tag', () => {
    try {
      parseStrictYaml('network:\n  &k mode: whitelist\n  *k : blacklist\n', 't');
      expect.unreachable();
    } catch (e) {
      const issues = (e as LeashError).details!.issues as { path: string; message: string }[];
      expect(issues.map((i) => i.path)).toEqual(['network.mode', 'network']);
      expect(issues[1]!.message).toContain('*k');
    }
  });
});

describe('encoding', () => {
  it('invalid UTF-8 is config_encoding at its byte, never U+FFFD', () => {
    const f = tmpFile(
      Buffer.concat([Buffer.from('filesystem:\n  deny: [/etc/sh'), Buffer.from([0xe0, 0x41]), Buffer.from('dow]\n')]),
    );
    try {
      loadConfig(f, { lookup });
      expect.unreachable();
    } catch (e) {
      expect((e as LeashError).code).toBe('config_encoding');
      const issues = (e as LeashError).details!.issues as { path: string }[];
      expect(issues[0]!.path).toBe('byte 28');
    }
  });

  it('a NUL is config_encoding', () => {
    expect(codeOf('filesystem:\n  deny: ["/etc/shadow\0x"]\n')).toBe('config_encoding');
  });

  it('a UTF-8 file with a BOM and non-ASCII comments is read', () => {
    const f = tmpFile(Buffer.from('\ufeff# politique — été\nuser: null\n', 'utf8'));
    expect(loadConfig(f, { lookup }).config.user).toBeNull();
  });
});

describe('size caps, bounded', () => {
  it('a file over the cap is config_too_large without reading it whole', () => {
    const f = tmpFile('');
    // A sparse 64 MiB file: refused from its size, nothing allocated for it.
    fs.truncateSync(f, 64 * 1024 * 1024);
    const before = process.memoryUsage().rss;
    expect(() => loadConfig(f, { lookup })).toThrow(expect.objectContaining({ code: 'config_too_large' }));
    expect(process.memoryUsage().rss - before).toBeLessThan(16 * 1024 * 1024);
  });

  it('a 12 MB tools entry (25 s / 1.9 GB before) is refused by size', () => {
    const f = tmpFile(`tools:\n  deny: ["${'a'.repeat(12_000_000)}"]\n`);
    expect(() => loadConfig(f, { lookup })).toThrow(expect.objectContaining({ code: 'config_too_large' }));
  });

  it('an entry over MAX_ENTRY_CHARS is entry_too_long, at its path', () => {
    try {
      parseConfig(`tools:\n  deny: [ok, "${'a'.repeat(MAX_ENTRY_CHARS + 1)}"]\n`, 't', { lookup });
      expect.unreachable();
    } catch (e) {
      expect((e as LeashError).code).toBe('entry_too_long');
      expect(((e as LeashError).details!.issues as { path: string }[])[0]!.path).toBe('tools.deny[1]');
    }
    expect(codeOf(`tools:\n  deny: ["${'a'.repeat(MAX_ENTRY_CHARS)}"]\n`)).not.toBe('entry_too_long');
  });

  it('a key over MAX_ENTRY_CHARS is entry_too_long', () => {
    expect(codeOf(`tools:\n  args:\n    ? ${'t'.repeat(MAX_ENTRY_CHARS + 1)}\n    : {allow: "*"}\n`)).toBe(
      'entry_too_long',
    );
  });

  it('a list over MAX_LIST_ITEMS is list_too_long; one at the cap loads', () => {
    const list = (n: number) =>
      `filesystem:\n  deny:\n${Array.from({ length: n }, (_, i) => `    - /srv/x${i}\n`).join('')}`;
    expect(codeOf(list(MAX_LIST_ITEMS + 1))).toBe('list_too_long');
    expect(codeOf(list(MAX_LIST_ITEMS))).toBe('accepted');
  });

  it('a mapping over MAX_LIST_ITEMS keys is list_too_long', () => {
    const m = Array.from({ length: MAX_LIST_ITEMS + 1 }, (_, i) => `    t${i}: {allow: "*"}\n`).join('');
    expect(codeOf(`tools:\n  args:\n${m}`)).toBe('list_too_long');
  });

  it('a file of many tiny items under the byte cap is refused before a document is built', () => {
    const text = `tools:\n  deny: [${Array.from({ length: 400_000 }, () => 'a').join(',')}]\n`;
    expect(Buffer.byteLength(text)).toBeLessThan(MAX_FILE_BYTES);
    const before = process.memoryUsage().rss;
    expect(codeOf(text)).toBe('config_too_large');
    expect(process.memoryUsage().rss - before).toBeLessThan(200 * 1024 * 1024);
  });

  it.each([
    ['flow', `x: ${'['.repeat(MAX_DEPTH + 1)}${']'.repeat(MAX_DEPTH + 1)}\n`],
    ['block', `x:\n${Array.from({ length: MAX_DEPTH + 2 }, (_, i) => `${' '.repeat(2 * i + 2)}-\n`).join('')}`],
    ['very deep flow', `x: ${'['.repeat(100_000)}${']'.repeat(100_000)}\n`],
  ])('%s nesting deeper than MAX_DEPTH is config_too_deep', (_w, text) => {
    expect(codeOf(text)).toBe('config_too_deep');
  });
});

describe('every policy-file loader uses the strict reader', () => {
  const ALIAS = 'tools:\n  &k mode: whitelist\n  *k : blacklist\n';

  it('leash mcp --policy', () => {
    const f = tmpFile(ALIAS);
    try {
      loadGatePolicyFile(f);
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(GatePolicyError);
      expect((e as GatePolicyError).problems.join('\n')).toContain('[config_alias]');
    }
  });

  it('leash terminal --policy', () => {
    const f = tmpFile('commands:\n  allow: [!!python/object:os.system git]\n');
    try {
      loadTerminalPolicy(f);
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(TerminalPolicyError);
      expect((e as TerminalPolicyError).kind).toBe('invalid');
      expect((e as TerminalPolicyError).problems.join('\n')).toContain('[config_tag]');
    }
  });

  it('a stored profile', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-hostile-'));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    fs.mkdirSync(path.join(dir, 'profiles'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'profiles', 'web.yaml'), ALIAS);
    const s = loadProfile(dir, 'web');
    expect(s.status).toBe('broken');
    expect(s.status === 'broken' && s.message).toContain('config_alias');
  });
});

describe('entries that look like another', () => {
  const parse = (text: string) => parseConfig(text, 't.yaml', { lookup });
  const lookalikes = (text: string) => parse(text).findings.filter((f) => f.code === 'entry_lookalike');

  it.each([
    ['a Cyrillic а in /etc/shadow', 'filesystem:\n  deny: ["/etc/sh\u0430dow"]\n', 'U+0430'],
    ['a zero-width space', 'filesystem:\n  deny: ["/etc/sha\u200bdow"]\n', 'U+200B'],
    ['a bidi override', 'filesystem:\n  deny: ["/srv/\u202egnp.exe"]\n', 'U+202E'],
    ['a control character', 'commands:\n  deny: ["cu\u0007rl"]\n', 'U+0007'],
    ['a replacement character', 'commands:\n  deny: ["/usr/bin/\ufffdsh"]\n', 'U+FFFD'],
    ['a Greek ο in a tool name', 'tools:\n  deny: ["shell_exec_r\u03bfot"]\n', 'U+03BF'],
    ['a replacement character in a tool name', 'tools:\n  deny: ["shell\ufffd"]\n', 'U+FFFD'],
    ['an allow entry too', 'filesystem:\n  allow: ["/home/fid\u043e"]\n', 'U+043E'],
  ])('%s is a critical entry_lookalike naming %s', (_w, text, cp) => {
    const f = lookalikes(text);
    expect(f).toHaveLength(1);
    expect(f[0]!.severity).toBe('critical');
    expect(f[0]!.message).toContain(cp);
  });

  it.each([
    ['a word wholly in Cyrillic', 'filesystem:\n  allow: ["/home/u/Документы"]\n'],
    ['Japanese', 'filesystem:\n  allow: ["/home/u/ドキュメント/日本語"]\n'],
    ['accented Latin', 'filesystem:\n  deny: ["/srv/café/résumé"]\n'],
    ['zero-width in a tool name (normalised away, so it still blocks)', 'tools:\n  deny: ["shell\u200b_exec"]\n'],
  ])('%s is not a lookalike', (_w, text) => {
    expect(lookalikes(text)).toEqual([]);
  });

  it('a profile with a lookalike deny is refused', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-hostile-'));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    fs.mkdirSync(path.join(dir, 'profiles'));
    fs.writeFileSync(path.join(dir, 'profiles', 'p.yaml'), 'filesystem:\n  deny: ["/etc/sh\u0430dow"]\n');
    const s = loadProfile(dir, 'p');
    expect(s.status).toBe('broken');
  });

  it('a write that adds a lookalike is refused with entry_lookalike and nothing is written', async () => {
    const f = tmpFile('user: null\nfilesystem:\n  deny: [/etc/shadow]\n');
    const before = fs.readFileSync(f, 'utf8');
    await expect(
      editConfig(f, (doc) => void addEntry(doc, 'filesystem', 'deny', '/etc/sh\u0430dow'), { lookup }),
    ).rejects.toMatchObject({ code: 'entry_lookalike', exitCode: EXIT.refused, details: { code_point: 'U+0430' } });
    expect(fs.readFileSync(f, 'utf8')).toBe(before);
  });
});

describe('a tools * is no wildcard', () => {
  it('a tools deny * is inert_deny (critical), and refused on write as entry_inert', async () => {
    const { findings } = parseConfig('tools:\n  deny: ["*"]\n', 't', { lookup });
    expect(findings.find((x) => x.code === 'inert_deny')).toMatchObject({ severity: 'critical', entry: '*' });
    const f = tmpFile('user: null\n');
    await expect(editConfig(f, (doc) => void addEntry(doc, 'tools', 'deny', '*'), { lookup })).rejects.toMatchObject({
      code: 'entry_inert',
    });
  });

  it('leash mcp --policy refuses it', () => {
    const f = tmpFile('tools:\n  mode: blacklist\n  deny: ["*"]\n');
    try {
      loadGatePolicyFile(f);
      expect.unreachable();
    } catch (e) {
      expect((e as GatePolicyError).problems.join('\n')).toContain('[entry_inert]');
    }
  });
});

describe('logging.decisions: what the service will do with it', () => {
  it.each([
    ['/', 'the root'],
    ['/var/log/leash/', 'a directory path'],
    ['"/var/log/x\\0y"', 'a NUL (YAML escape)'],
    ['"/var/log/x\\ny"', 'a newline'],
    ['/var/log/../etc/x', 'a .. segment'],
    ['/proc/sys/kernel/core_pattern', 'a kernel interface'],
    ['/dev/sda', 'a device'],
  ])('%s (%s) is config_invalid', (sink) => {
    expect(codeOf(`logging:\n  decisions: ${sink}\n`)).toBe('config_invalid');
  });

  it.each(['stdout', '/dev/null', '/var/log/leash/decisions.jsonl'])('%s loads', (sink) => {
    expect(codeOf(`logging:\n  decisions: ${sink}\n`)).toBe('accepted');
  });

  it('the host checks: a file that is not a decision log, a directory, a symlink, a file as parent', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-sink-'));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const j = (n: string) => path.join(dir, n);
    fs.writeFileSync(j('passwd'), 'root:x:0:0:root:/root:/bin/bash\n');
    fs.writeFileSync(j('log.jsonl'), '{"ts":"2026-01-01T00:00:00Z","action":"allow"}\n');
    fs.writeFileSync(j('empty'), '');
    fs.symlinkSync(j('log.jsonl'), j('link'));
    expect(sinkProblem(j('passwd'))).toMatch(/not a decision log/);
    expect(sinkProblem(dir)).toMatch(/directory/);
    expect(sinkProblem(j('link'))).toMatch(/symbolic link/);
    expect(sinkProblem(j('passwd/x'))).toMatch(/not a directory/);
    expect(sinkProblem(j('log.jsonl'))).toBeNull();
    expect(sinkProblem(j('empty'))).toBeNull();
    expect(sinkProblem(j('new/sub/decisions.jsonl'))).toBeNull();
    expect(sinkProblem('/dev/null')).toBeNull();
    expect(sinkProblem('stdout')).toBeNull();
  });
});

describe('network grammar oddities, settled', () => {
  it.each([
    [':00443', 'bad_port'],
    ['github.com:00443', 'bad_port'],
    ['github.com:0443', 'bad_port'],
    ['[2001:db8::1]:0443', 'bad_port'],
    ['0x7f.0.0.1', 'bad_ip'],
    ['0x7f000001', 'bad_ip'],
    ['0x7f.1', 'bad_ip'],
    ['0X7F.0.0.1:443', 'bad_ip'],
    ['0177.0.0.1', 'bad_ip'],
    ['2130706433', 'bad_ip'],
  ])('%s is inert (%s)', (entry, code) => {
    expect(networkEntryProblem(entry)?.code).toBe(code);
  });

  it.each(['github.com:443', '127.0.0.1:8080', '[2001:db8::1]:443', '0x0.ai', '0xdeadbeef.example', '10.0.0.0/8'])(
    '%s is well-formed',
    (entry) => {
      expect(networkEntryProblem(entry)).toBeNull();
    },
  );

  it('a refused entry is refused on write with entry_inert', async () => {
    const f = tmpFile('user: null\n');
    await expect(
      editConfig(f, (doc) => void addEntry(doc, 'network', 'deny', '0x7f.0.0.1'), { lookup }),
    ).rejects.toMatchObject({ code: 'entry_inert' });
  });
});
