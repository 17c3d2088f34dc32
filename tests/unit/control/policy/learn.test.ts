import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import { toPolicyInput } from '../../../../src/control/config/policy-input.js';
import { compilePolicy, decide } from '../../../../src/engine/index.js';
import { fold, floorOf, type Effective } from '../../../../src/control/policy/fragment.js';
import {
  learnFragment,
  networkEntry,
  parseDuration,
  renderLearned,
  type SeenLine,
} from '../../../../src/control/policy/learn.js';
import { parseProfileText } from '../../../../src/control/policy/profiles.js';
import { seenLines, writeNew } from '../../../../src/cli/learn.js';

const floor = floorOf(
  configSchema.parse({
    network: { mode: 'whitelist', allow: ['github.com'] },
    filesystem: { mode: 'whitelist', allow: ['/work'], deny: ['/work/.env'] },
    commands: { mode: 'blacklist', deny: ['ssh'] },
  }),
);
const strict: Effective = fold(floor, { network: { allow: [] }, filesystem: { allow: ['/work/a'] } });
const ts = '2026-12-02T06:00:00.000Z';
const line = (surface: string, reason: string, subject: unknown, rule: string | null = null): SeenLine => ({
  ts,
  uid: 2001,
  surface,
  action: 'would_block',
  reason,
  subject,
  rule,
});

describe('leash learn: the tightest proposal', () => {
  const seen = [
    line('network', 'not_allowed', { domain: null, ip: '198.18.0.2', port: 8080 }),
    line('network', 'not_allowed', { domain: 'api.lab', ip: '198.18.0.2', port: 443 }),
    line('network', 'not_allowed', { dns: 'api.lab', qtype: 'A' }),
    line('network', 'not_allowed', { dns: 'only-looked-up.lab', qtype: 'A' }),
    line('filesystem', 'not_allowed', { path: '/work/b/file.txt' }),
    line('filesystem', 'not_allowed', { path: '/work/b/file.txt' }),
    line('filesystem', 'deny_entry', { path: '/work/.env' }, '/work/.env'),
    line('commands', 'deny_entry', { binary: '/usr/bin/ssh' }, 'ssh'),
    line('network', 'ech_refused', { domain: 'x.lab', ip: '198.18.0.2', port: 443, ech: true }),
  ];
  const r = learnFragment(seen, strict, floor);
  const proposed = fold(strict, r.fragment);
  const p = compilePolicy(toPolicyInput(proposed));

  it('allows exactly what was seen, pinned to the port and the path', () => {
    expect(r.added.network).toEqual(['198.18.0.2:8080', 'api.lab:443']);
    expect(r.added.filesystem).toEqual(['/work/b/file.txt', '/work/.env']);
    expect(decide('network', { ip: '198.18.0.2', port: 8080 }, p).action).toBe('allow');
    expect(decide('network', { domain: 'api.lab', ip: '198.18.0.2', port: 443 }, p).action).toBe('allow');
    expect(decide('filesystem', { path: '/work/b/file.txt' }, p).action).toBe('allow');
    expect(decide('commands', { binary: '/usr/bin/ssh' }, p).action).toBe('allow');
  });
  it('blocks what was not seen: another port, a sibling file, what the old profile blocked', () => {
    expect(decide('network', { ip: '198.18.0.2', port: 8081 }, p).action).toBe('block');
    expect(decide('network', { domain: 'github.com', port: 443 }, p).action).toBe('block');
    expect(decide('filesystem', { path: '/work/b/other.txt' }, p).action).toBe('block');
    expect(decide('filesystem', { path: '/work/c' }, p).action).toBe('block');
    expect(decide('filesystem', { path: '/work/a/kept' }, p).action).toBe('allow');
  });
  it('says what it dropped and what it left out', () => {
    expect(r.dropped.filesystem).toEqual(['/work/.env']);
    expect(r.dropped.commands).toEqual(['ssh']);
    expect(r.leftOut.some((l) => l.includes('only-looked-up.lab'))).toBe(true);
    expect(r.leftOut.some((l) => l.includes('ech_refused'))).toBe(true);
    expect(r.leftOut.some((l) => l.includes('api.lab'))).toBe(false);
  });
  it('says, as a comment and a finding, where it is wider than the floor', () => {
    const tokens = r.widerThanFloor.map((f) => f.token);
    expect(tokens).toContain('filesystem.unset.deny:/work/.env');
    expect(tokens).toContain('commands.unset.deny:ssh');
    expect(tokens).toContain('network.allow:198.18.0.2:8080');
    const text = renderLearned(r, { subject: 'leash-iris', since: '1h', now: new Date(ts) }, (v) => YAML.stringify(v));
    expect(text).toMatch(/^# WIDER THAN THE FLOOR .*filesystem\.unset\.deny:\/work\/\.env/m);
    // The file is a valid profile as it stands.
    expect(parseProfileText(text, 'learned.yaml').filesystem?.allow).toContain('/work/b/file.txt');
  });
  it('a proposal inside the floor says nothing is wider', () => {
    const r2 = learnFragment([line('filesystem', 'not_allowed', { path: '/work/z' })], strict, floor);
    expect(r2.widerThanFloor).toEqual([]);
  });
});

describe('leash learn: input and output', () => {
  it('reads only the subject and window, would_block and block lines', () => {
    const text = [
      JSON.stringify({ ...line('filesystem', 'not_allowed', { path: '/a' }), ts: '2026-12-02T04:00:00.000Z' }),
      JSON.stringify(line('filesystem', 'not_allowed', { path: '/b' })),
      JSON.stringify({ ...line('filesystem', 'not_allowed', { path: '/c' }), uid: 2002 }),
      JSON.stringify({ ...line('filesystem', 'allow_entry', { path: '/d' }), action: 'allow' }),
      JSON.stringify({ ...line('filesystem', 'not_allowed', { path: '/e' }), action: 'block' }),
      '{"ts":"partial',
    ].join('\n');
    const got = seenLines(text, 2001, Date.parse('2026-12-02T05:00:00.000Z'));
    expect(got.map((l) => (l.subject as { path: string }).path)).toEqual(['/b', '/e']);
  });
  it('never overwrites an existing file', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-learn-'));
    try {
      const f = path.join(dir, 'p.yaml');
      writeNew(f, 'a: 1\n');
      expect(() => writeNew(f, 'b: 2\n')).toThrow(expect.objectContaining({ code: 'learn_out_exists' }));
      expect(fs.readFileSync(f, 'utf8')).toBe('a: 1\n');
      expect(fs.readdirSync(dir)).toEqual(['p.yaml']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
  it('parses durations and refuses others', () => {
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('2h')).toBe(7_200_000);
    expect(parseDuration('1w')).toBeNull();
    expect(parseDuration('0m')).toBeNull();
  });
  it('IPv6 addresses are bracketed with their port', () => {
    expect(networkEntry({ ip: '2001:db8::5', port: 443 })).toBe('[2001:db8::5]:443');
    expect(networkEntry({ ip: '::ffff:198.18.0.2', port: 80 })).toBe('198.18.0.2:80');
  });
});
