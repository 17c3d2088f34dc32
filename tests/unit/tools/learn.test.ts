import { describe, expect, it } from 'vitest';
import { checkArgs } from '../../../src/tools/judge/decide.js';
import { compileToolArgs } from '../../../src/tools/judge/compile.js';
import { parseStrict } from '../../../src/formats/json.js';
import { parseFragment } from '../../../src/control/config/load.js';
import { Learner, learnArgs, learnStringPattern, renderProfile } from '../../../src/tools/learn/learn.js';
import { validateGatePolicy } from '../../../src/tools/judge/policy-file.js';
import { parse as parseYaml } from 'yaml';

const j = (s: string) => parseStrict(Buffer.from(s));

describe('learned string patterns', () => {
  it.each([
    [['ls'], '^ls$'],
    [['/tmp/a.txt', '/tmp/b.txt'], '^(?!.*(?:^|[/\\\\])\\.\\.(?:[/\\\\]|$))\\/tmp\\/[a-zA-Z0-9_.-]*$'],
    [['file1', 'file22'], '^file[0-9]*$'],
    [['abc', 'xyz'], '^(?:abc|xyz)$'],
    [['a.b', 'a.c'], '^a\\.[a-z]*$'],
  ])('%j → %s', (values, pattern) => {
    expect(learnStringPattern(values)).toBe(pattern);
  });

  it('never writes .* and always anchors', () => {
    for (const vals of [['a b', 'a c!'], ['x'], ['/x/y', '/x/z/w'], ['é1', 'é2']]) {
      const p = learnStringPattern(vals);
      expect(p).not.toContain('.*$');
      expect(p.startsWith('^') && p.endsWith('$')).toBe(true);
      for (const v of vals) expect(new RegExp(p, 'u').test(v)).toBe(true);
    }
  });

  it('a learned path pattern never admits a .. segment', () => {
    const rules = learnArgs([j('{"path":"/srv/a/b"}'), j('{"path":"/srv/c"}')])!;
    const c = compileToolArgs({ allow: rules });
    expect(checkArgs(j('{"path":"/srv/x/y"}'), c, true).ok).toBe(true);
    expect(checkArgs(j('{"path":"/srv/../etc"}'), c, true).ok).toBe(false);
    expect(checkArgs(j('{"path":"/srv/..\\\\x"}'), c, true).ok).toBe(false);
  });
});

describe('learned argument rules', () => {
  it('types: a learned count admits 3 and never "3"; nested paths and arrays collapse to *', () => {
    const rules = learnArgs([j('{"cmd":"ls","count":3,"cfg":{"a":true},"tags":["x","y"],"e":{}}')])!;
    expect(Object.keys(rules).sort()).toEqual(['cfg.a', 'cmd', 'count', 'e', 'tags.*']);
    const c = compileToolArgs({ allow: rules });
    expect(checkArgs(j('{"cmd":"ls","count":7}'), c, true).ok).toBe(true);
    expect(checkArgs(j('{"cmd":"ls","count":"3"}'), c, true).ok).toBe(false);
    expect(checkArgs(j('{"cmd":"rm"}'), c, true).ok).toBe(false);
    expect(checkArgs(j('{"cmd":"ls","other":1}'), c, true).ok).toBe(false);
    expect(checkArgs(j('{"e":{}}'), c, true).ok).toBe(true);
    expect(checkArgs(j('{"e":[]}'), c, true).ok).toBe(false);
  });

  it('refuses argument names that cannot be written as a path', () => {
    expect(learnArgs([j('{"a.b":1}')])).toBeNull();
    expect(learnArgs([j('{"*":1}')])).toBeNull();
  });
});

describe('Learner', () => {
  it('allowlists only tools called successfully; the rest are not called', () => {
    const l = new Learner();
    l.toolsListed(['read_file', 'delete_all', 'run']);
    l.call('read_file', j('{"path":"/a"}'), true);
    l.call('run', j('{}'), false);
    l.call('bare', undefined, true);
    const { profile } = l.build();
    const tools = profile.tools as { allow: string[]; args: Record<string, unknown>; strict_args: boolean };
    expect(tools.allow).toEqual(['bare', 'read_file']);
    expect(profile._not_called).toEqual(['delete_all', 'run']);
    expect(tools.args.bare).toBeUndefined();
    expect(tools.strict_args).toBe(true);
  });

  it('leaves out names with * and names that collide once normalised', () => {
    const l = new Learner();
    l.call('a*', j('{}'), true);
    l.call('Read', j('{}'), true);
    l.call('read', j('{}'), true);
    const b = l.build();
    expect((b.profile.tools as { allow: string[] }).allow).toEqual([]);
    expect(b.leftOut).toHaveLength(3);
    expect(b.summary).toMatch(/\(3 left out\)/);
  });
});

describe('renderProfile', () => {
  it('writes a file that is both a Leash profile and a leash mcp --policy file; notes are comments', () => {
    const l = new Learner();
    l.toolsListed(['read_file', 'delete_all']);
    l.call('read_file', j('{"path":"/work/a.txt"}'), true);
    const text = renderProfile(l.build().profile);
    expect(text).toMatch(/^# Learned by leash mcp learn/);
    expect(text).toContain('# Listed by the server but never called (left denied): delete_all');
    const { fragment } = parseFragment(text, 'learned.yaml');
    expect(fragment.tools?.allow).toEqual(['read_file']);
    expect(fragment.tools?.strict_args).toBe(true);
    expect(Object.keys(fragment.tools?.args ?? {})).toEqual(['read_file']);
    expect(validateGatePolicy(parseYaml(text)).tools.allow).toEqual(['read_file']);
  });
});
