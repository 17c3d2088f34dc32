import { describe, expect, it } from 'vitest';
import { checkArgs } from '../../../src/tools/judge/decide.js';
import { compileToolArgs } from '../../../src/tools/judge/compile.js';
import { GATE_DEFAULTS, type ToolArgsSpec } from '../../../src/tools/judge/fields.js';
import { fromPlain, parseStrict } from '../../../src/formats/json.js';
import { isOtherSpelling, normalizeToolName, otherSpellingOf } from '../../../src/tools/judge/names.js';
import { checkTool, judgeRequest } from '../../../src/tools/judge/decide.js';
import { compileGatePolicy, GatePolicyError, type ToolsGatePolicy } from '../../../src/tools/judge/compile.js';
import { validateGatePolicy } from '../../../src/tools/judge/policy-file.js';
import { fakeEngine } from '../../fixtures/fake-tools-engine.js';

const j = (s: string) => parseStrict(Buffer.from(s));
const args = (spec: ToolArgsSpec, a: string, strict = false) => checkArgs(j(a), compileToolArgs(spec), strict);

function policy(over: Partial<ToolsGatePolicy>) {
  return compileGatePolicy(
    {
      mode: 'whitelist',
      allow: [],
      deny: [],
      inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' },
      ...GATE_DEFAULTS,
      ...over,
    },
    'closed',
    fakeEngine,
  );
}

describe('tool names', () => {
  it.each([
    ['delete_all', 'delete_all'],
    ['Delete_All', 'delete_all'],
    ['ＤＥＬＥＴＥ＿ａｌｌ', 'delete_all'],
    ['delete\u200b_all', 'delete_all'],
    ['\ufeffdelete_all\u00ad', 'delete_all'],
    ['  delete_all  ', 'delete_all'],
    ['dele\u0301te_all', 'del\u00e9te_all'],
    ['ſtrasse', 'strasse'],
  ])('%j normalises to %s', (n, out) => {
    expect(normalizeToolName(n)).toBe(out);
  });

  it.each([
    ['Method', 'method', true],
    ['METHOD', 'method', true],
    ['méthod', 'method', true],
    ['me\u200bthod', 'method', true],
    ['ｍｅｔｈｏｄ', 'method', true],
    ['paramſ', 'params', true],
    ['method', 'method', false],
    ['methods', 'method', false],
    ['nextcursor', 'nextCursor', true],
  ])('%j is another spelling of %s: %s', (k, c, yes) => {
    expect(isOtherSpelling(k, c)).toBe(yes);
    expect(otherSpellingOf(k, [c]) !== null).toBe(yes);
  });
});

describe('argument rules', () => {
  const readFile: ToolArgsSpec = { deny: { '**.path': ['^/etc/', '\\.\\.'] } };
  it.each([
    ['{"path":"/tmp/a"}', true],
    ['{"path":"/etc/passwd"}', false],
    ['{"PATH":"/etc/passwd"}', false],
    ['{"path":{"$ref":"/etc/passwd"}}', false],
    ['{"files":[{"path":"/etc/shadow"}]}', false],
    ['{"path":["..","secret"]}', false],
    ['{"other":"/etc/passwd"}', true],
  ])('deny **.path: %s → %s', (a, ok) => {
    expect(args(readFile, a).ok).toBe(ok);
  });

  it('checks arrays of scalars as one space-joined string', () => {
    const spec: ToolArgsSpec = { deny: ['rm -rf /'] };
    expect(args(spec, '{"argv":["rm","-rf","/"]}')).toMatchObject({ ok: false, reason: 'arg_denied', at: 'argv' });
    expect(args(spec, '{"argv":["ls","-l"]}').ok).toBe(true);
  });

  it('a plain list is shorthand for every value anywhere', () => {
    expect(args({ deny: ['secret'] }, '{"a":{"b":[{"c":"my secret"}]}}').ok).toBe(false);
  });

  const runCmd: ToolArgsSpec = {
    deny: ['rm -rf'],
    allow: { cmd: ['^(?:ls|cat) '], count: [{ type: 'number' }] },
  };
  it.each([
    ['{"cmd":"ls -l"}', true, undefined],
    ['{"cmd":"ls -l","count":3}', true, undefined],
    ['{"cmd":"ls -l","count":"3"}', false, 'arg_not_allowed'],
    ['{"cmd":"rm -rf /"}', false, 'arg_denied'],
    ['{"cmd":"ls -l","extra":"x"}', false, 'arg_not_allowed'],
    ['{"cmd":{"nested":"ls x"}}', false, 'arg_not_allowed'],
    ['{"cmd":[]}', false, 'arg_not_allowed'],
    ['{"Cmd":"ls -l"}', false, 'arg_not_allowed'],
    ['{}', true, undefined],
  ])('allow matches the exact shape: %s → %s', (a, ok, reason) => {
    const v = args(runCmd, a);
    expect(v.ok).toBe(ok);
    if (!v.ok) expect(v.reason).toBe(reason);
  });

  it('$ means the end of the value, never before a trailing newline', () => {
    const spec: ToolArgsSpec = { allow: { cmd: ['^ls$'] } };
    expect(args(spec, '{"cmd":"ls"}').ok).toBe(true);
    expect(args(spec, '{"cmd":"ls\\n"}').ok).toBe(false);
    const py: ToolArgsSpec = { allow: { cmd: ['\\Als\\Z'] } };
    expect(args(py, '{"cmd":"ls"}').ok).toBe(true);
    expect(args(py, '{"cmd":"ls\\n"}').ok).toBe(false);
    expect(args(py, '{"cmd":"A"}').ok).toBe(false);
  });

  it.each(['/srv/data/../../etc/passwd', 'C:\\\\proj\\\\..\\\\.ssh', '..\\\\x', '..', '../x', '/srv/data/..'])(
    'never admits a .. segment by accident: %s',
    (val) => {
      const spec: ToolArgsSpec = { allow: { path: ['^.*$'] } };
      expect(args(spec, `{"path":"${val}"}`)).toMatchObject({ ok: false, reason: 'arg_not_allowed' });
      const guarded: ToolArgsSpec = { allow: { path: ['^(?!.*(?:^|[/\\\\])\\.\\.(?:[/\\\\]|$)).*$'] } };
      expect(args(guarded, `{"path":"${val}"}`).ok).toBe(false);
      const spelled: ToolArgsSpec = { allow: { path: ['^.*\\.\\..*$'] } };
      expect(args(spelled, `{"path":"${val}"}`).ok).toBe(true);
    },
  );

  it('admits file names with dots that are not a .. segment', () => {
    const spec: ToolArgsSpec = { allow: { path: ['^/srv/'] } };
    expect(args(spec, '{"path":"/srv/a..b/x...y"}').ok).toBe(true);
  });

  it('* is one segment, ** any number', () => {
    const spec: ToolArgsSpec = { allow: { 'files.*.path': ['^/srv/'], 'cfg.**': [{ type: 'boolean' }] } };
    expect(args(spec, '{"files":[{"path":"/srv/a"},{"path":"/srv/b"}]}').ok).toBe(true);
    expect(args(spec, '{"files":[{"path":"/srv/a","mode":"x"}]}').ok).toBe(false);
    expect(args(spec, '{"cfg":{"a":{"b":true},"c":false}}').ok).toBe(true);
    expect(args(spec, '{"cfg":{"a":{"b":"true"}}}').ok).toBe(false);
  });

  it('typed rules: a learned count admits 3, never "3"; a plain pattern admits both', () => {
    expect(args({ allow: { n: [{ type: 'number', pattern: '^3$' }] } }, '{"n":3}').ok).toBe(true);
    expect(args({ allow: { n: [{ type: 'number', pattern: '^3$' }] } }, '{"n":"3"}').ok).toBe(false);
    expect(args({ allow: { n: ['^3$'] } }, '{"n":"3"}').ok).toBe(true);
    expect(args({ allow: { n: [{ type: 'array' }] } }, '{"n":[]}').ok).toBe(true);
    expect(args({ allow: { n: [{ type: 'null' }] } }, '{"n":null}').ok).toBe(true);
  });

  it('allow "*" admits any arguments but deny rules still apply', () => {
    const spec: ToolArgsSpec = { allow: '*', deny: ['^/etc'] };
    expect(args(spec, '{"a":{"b":[1,2,{"c":"x"}]}}').ok).toBe(true);
    expect(args(spec, '{"a":{"b":[1,2,{"c":"/etc/x"}]}}').ok).toBe(false);
  });

  it('strict_args: a tool without allow rules takes only {}', () => {
    expect(checkArgs(j('{}'), null, true).ok).toBe(true);
    expect(checkArgs(undefined, null, true).ok).toBe(true);
    expect(checkArgs(j('{"q":{}}'), null, true)).toMatchObject({ ok: false, reason: 'strict_args' });
    expect(checkArgs(j('{"q":1}'), null, false).ok).toBe(true);
  });

  it('refuses arguments that are not an object, or nested beyond 100 levels', () => {
    expect(checkArgs(j('"x"'), null, false)).toMatchObject({ ok: false, reason: 'args_not_object' });
    expect(checkArgs(j('[1]'), null, false)).toMatchObject({ ok: false, reason: 'args_not_object' });
    const deep = '{"a":'.repeat(101) + '1' + '}'.repeat(101);
    expect(checkArgs(j(deep), null, false)).toMatchObject({ ok: false, reason: 'args_too_deep' });
  });

  it('refuses unreadable rules', () => {
    expect(() => compileToolArgs({ deny: { 'a..b': ['x'] } })).toThrow(/empty path segment/);
    expect(() => compileToolArgs({ deny: ['('] })).toThrow(/bad regex/);
    expect(() => compileToolArgs({ alow: {} } as never)).toThrow(/unknown key 'alow'/);
    expect(() => compileToolArgs({ allow: { a: [{ type: 'numbr' as never }] } })).toThrow(/type must be/);
  });
});

describe('checkTool and judgeRequest', () => {
  const pol = policy({
    allow: ['read_file', 'run_cmd', 'delete_all', 'greet'],
    deny: ['delete_all'],
    args: { Read_File: { deny: { '**.path': ['^/etc/'] } } },
    deny_methods: ['resources/*'],
    policed_methods: ['prompts/get', 'resources/read'],
  });
  it('deny wins over allow', () => {
    expect(checkTool('delete_all', undefined, pol)).toMatchObject({ action: 'block', reason: 'deny_entry' });
    expect(checkTool('ＤＥＬＥＴＥ_ALL\u200b', undefined, pol)).toMatchObject({
      action: 'block',
      reason: 'deny_entry',
    });
  });
  it('selects argument rules by the normalised name', () => {
    expect(checkTool('READ_FILE', j('{"path":"/etc/x"}'), pol)).toMatchObject({
      action: 'block',
      reason: 'arg_denied',
    });
    expect(checkTool('read_file', j('{"path":"/tmp/x"}'), pol)).toMatchObject({ action: 'allow' });
  });
  it('deny_methods globs, case-insensitive, -32601', () => {
    expect(judgeRequest('RESOURCES/LIST', undefined, pol)).toMatchObject({ action: 'deny', code: -32601 });
    expect(judgeRequest('ping', undefined, pol)).toMatchObject({ action: 'allow', policed: false });
  });
  it('polices Tools/Call as tools/call', () => {
    expect(judgeRequest('Tools/Call', j('{"name":"delete_all"}'), pol)).toMatchObject({ action: 'deny', code: -32001 });
  });
  it.each([
    ['{"name":"greet","Name":"delete_all"}', 'bad_params'],
    ['{"name":"greet","arguments":{},"ARGUMENTS":{"x":1}}', 'bad_params'],
    ['{"name":"greet","uri":"file:///etc/passwd"}', 'bad_selector'],
    ['{"name":5}', 'bad_selector'],
    ['{}', 'bad_selector'],
    ['{"name":"greet","arguments":"x"}', 'args_not_object'],
  ])('refuses tools/call params %s with -32602 (%s)', (params, reason) => {
    expect(judgeRequest('tools/call', j(params), pol)).toMatchObject({ action: 'deny', code: -32602, reason });
  });
  it('judges other policed methods by their own selector', () => {
    expect(judgeRequest('prompts/get', j('{"name":"greet"}'), pol)).toMatchObject({ action: 'allow', policed: true });
    expect(judgeRequest('prompts/get', j('{"name":"nope"}'), pol)).toMatchObject({
      action: 'deny',
      reason: 'not_allowed',
    });
  });
  it('refuses an args key that is a glob, or two keys naming one tool', () => {
    expect(() => policy({ args: { 'delete_*': { deny: ['x'] } } })).toThrow(GatePolicyError);
    expect(() => policy({ args: { Read: { deny: ['x'] }, read: { deny: ['y'] } } })).toThrow(GatePolicyError);
  });
  it('fromPlain keeps integers as numbers and floats as floats', () => {
    expect(fromPlain({ a: 1, b: 1.5 })).toMatchObject({ a: 1 });
  });
});

describe('policy file validation', () => {
  it('suggests the key that was meant', () => {
    try {
      validateGatePolicy({ tools: { alow: ['x'] } });
      expect.unreachable();
    } catch (e) {
      expect((e as GatePolicyError).problems.join('\n')).toMatch(/unknown key 'alow' \(did you mean 'allow'\?\)/);
    }
  });
  it('refuses an object where a tool list belongs', () => {
    expect(() => validateGatePolicy({ tools: { deny: { a: 1 } } })).toThrow(GatePolicyError);
  });
  it('fills defaults', () => {
    const p = validateGatePolicy({ tools: { allow: ['a'] } });
    expect(p.tools).toMatchObject({
      mode: 'whitelist',
      strict_args: false,
      policed_methods: ['tools/call'],
      log_args: 'denied',
    });
  });
});

describe('arguments in the log', () => {
  it('cuts strings to 200 characters and masks through the given masker', async () => {
    const { redactForLog } = await import('../../../src/tools/judge/redact.js');
    const v = redactForLog(j(`{"a":"${'x'.repeat(500)}","k":"TOKEN-1","n":[1.5,2]}`), (s) =>
      s.replace('TOKEN-1', '****'),
    );
    const o = v as { a: string; k: string; n: number[] };
    expect(o.a.length).toBeLessThanOrEqual(201);
    expect(o.k).toBe('****');
    expect(o.n).toEqual([1.5, 2]);
  });
});
