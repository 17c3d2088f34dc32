import { describe, expect, it } from 'vitest';
import { type Account } from '../../../../src/control/config/accounts.js';
import { parseConfig, parseFragment } from '../../../../src/control/config/load.js';
import { compilePolicy, decide } from '../../../../src/engine/index.js';
import { checkTool } from '../../../../src/tools/judge/decide.js';
import { compileGatePolicy } from '../../../../src/tools/judge/compile.js';
import { GATE_DEFAULTS } from '../../../../src/tools/judge/fields.js';
import { GATE_ENGINE } from '../../../../src/tools/judge/compile.js';
import { gatePolicyOf } from '../../../../src/tools/judge/from-config.js';
import { validateTerminalPolicy } from '../../../../src/tools/terminal/policy-file.js';
import { LeashError } from '../../../../src/errors.js';

const accounts: Record<string, Account> = { fido: { name: 'fido', uid: 1234, gid: 2345, home: '/home/fido' } };
const parse = (text: string) => parseConfig(text, 'test.yaml', { lookup: (n) => accounts[n] ?? null });

function refusedPaths(fn: () => unknown): string[] {
  try {
    fn();
  } catch (e) {
    if (e instanceof LeashError && e.code === 'config_invalid')
      return (e.details?.issues as { path: string }[]).map((i) => i.path);
    throw e;
  }
  throw new Error('expected config_invalid');
}

const GATE_YAML = `user: fido
tools:
  mode: whitelist
  allow: [read_file, run]
  strict_args: true
  hide_denied: true
  deny_methods: ["resources/*"]
  policed_methods: [tools/call, prompts/get]
  log_args: none
  args:
    read_file:
      allow: { path: ["^/work/[^/]+$"] }
      deny: ["\\\\.env$"]
    run:
      allow: "*"
      deny: { cmd: [{ type: string, pattern: "rm -rf" }] }
`;

describe('tools: the MCP gate fields in leash.yaml', () => {
  it('a plain config gets the gate defaults', () => {
    const { config } = parse('user: fido\n');
    const { mode: _m, allow: _a, deny: _d, ask: _k, inspect: _i, ...gate } = config.tools;
    expect(gate).toEqual(GATE_DEFAULTS);
    expect(config.commands.args).toEqual({});
  });

  it('accepts every gate field and gatePolicyOf hands them to the gate unchanged', () => {
    const { config } = parse(GATE_YAML);
    expect(config.tools.strict_args).toBe(true);
    expect(config.tools.hide_denied).toBe(true);
    expect(config.tools.deny_methods).toEqual(['resources/*']);
    expect(config.tools.log_args).toBe('none');
    const g = compileGatePolicy(gatePolicyOf(config), config.fail_mode, GATE_ENGINE);
    expect(g.hideDenied).toBe(true);
    expect(g.strictArgs).toBe(true);
    // The argument rules from leash.yaml decide: an allowed path passes, a denied one is blocked.
    expect(checkTool('read_file', { path: '/work/notes' }, g).action).toBe('allow');
    expect(checkTool('read_file', { path: '/work/.env' }, g)).toMatchObject({ action: 'block', reason: 'arg_denied' });
    expect(checkTool('read_file', { path: '/etc/passwd' }, g)).toMatchObject({
      action: 'block',
      reason: 'arg_not_allowed',
    });
    expect(checkTool('run', { cmd: 'rm -rf /x' }, g)).toMatchObject({ action: 'block', reason: 'arg_denied' });
  });

  it('refuses bad gate values with the field path', () => {
    expect(refusedPaths(() => parse('tools:\n  strict_args: yes please\n'))).toEqual(['tools.strict_args']);
    expect(refusedPaths(() => parse('tools:\n  log_args: some\n'))).toEqual(['tools.log_args']);
    expect(refusedPaths(() => parse('tools:\n  deny_methods: [""]\n'))).toEqual(['tools.deny_methods[0]']);
    expect(refusedPaths(() => parse('tools:\n  args: { t: { alow: "*" } }\n'))).toEqual(['tools.args.t.alow']);
    expect(refusedPaths(() => parse('tools:\n  args: { t: { deny: { p: [{ typ: string }] } } }\n'))).toHaveLength(1);
  });

  it('what the gate would refuse at start is refused at load: a bad regex, a glob args key', () => {
    expect(refusedPaths(() => parse('tools:\n  args: { t: { deny: { p: ["("] } } }\n'))[0]).toMatch(/^tools\.args\.t/);
    expect(refusedPaths(() => parse('tools:\n  args: { "t*": { deny: ["x"] } }\n'))).toEqual(['tools.args.t*']);
    expect(refusedPaths(() => parse('tools:\n  policed_methods: ["tools/*"]\n'))).toEqual(['tools.policed_methods']);
    expect(() => parseFragment('tools:\n  args: { t: { deny: ["("] } }\n', 'p.yaml')).toThrow(LeashError);
  });

  it('a profile (fragment) carries only the gate fields it sets, with the same checks', () => {
    const { fragment } = parseFragment('tools:\n  strict_args: false\n  args: { t: { deny: ["x"] } }\n', 'p.yaml');
    expect(fragment.tools).toEqual({ strict_args: false, args: { t: { deny: ['x'] } } });
    expect(() => parseFragment('tools:\n  hide_denied: maybe\n', 'p.yaml')).toThrow(LeashError);
  });
});

describe('commands.args: leash terminal argument rules in leash.yaml', () => {
  const YAML = `user: fido
commands:
  mode: whitelist
  allow: [git, ls]
  args:
    git: { deny_args: ["push --force", "push -f"], reason: history is shared }
    /usr/bin/rsync: { deny_args: ["--delete"] }
`;

  it('accepts the shape docs/terminal.md gives, and the terminal reads it back unchanged', () => {
    const { config } = parse(YAML);
    expect(config.commands.args).toEqual({
      git: { deny_args: ['push --force', 'push -f'], reason: 'history is shared' },
      '/usr/bin/rsync': { deny_args: ['--delete'] },
    });
    // What the service answers on commands_policy is what the terminal's own reader accepts.
    const t = validateTerminalPolicy({ fail_mode: config.fail_mode, commands: config.commands });
    expect(t.commands.args).toEqual(config.commands.args);
  });

  it('refuses what the terminal refuses: unknown keys, missing or empty deny_args, inert keys', () => {
    expect(refusedPaths(() => parse('commands:\n  args: { git: { deny: ["x"] } }\n'))).toEqual([
      'commands.args.git.deny_args',
      'commands.args.git.deny',
    ]);
    expect(refusedPaths(() => parse('commands:\n  args: { git: { deny_args: [] } }\n'))).toEqual([
      'commands.args.git.deny_args',
    ]);
    expect(refusedPaths(() => parse('commands:\n  args: { git: { deny_args: ["  "] } }\n'))).toEqual([
      'commands.args.git.deny_args[0]',
    ]);
    expect(refusedPaths(() => parse('commands:\n  args: { "git push": { deny_args: ["x"] } }\n'))).toEqual([
      'commands.args.git push',
    ]);
    expect(refusedPaths(() => parse('commands:\n  args: { "*": { deny_args: ["x"] } }\n'))).toEqual([
      'commands.args.*',
    ]);
  });

  it('a profile may carry commands.args alone', () => {
    const { fragment } = parseFragment('commands:\n  args: { git: { deny_args: ["push -f"] } }\n', 'p.yaml');
    expect(fragment.commands).toEqual({ args: { git: { deny_args: ['push -f'] } } });
  });

  it('the engine still judges the commands surface with args present', () => {
    const { config } = parse(YAML);
    const p = compilePolicy({ ...config, tools: { ...config.tools } });
    expect(decide('commands', { binary: '/usr/bin/git' }, p).action).toBe('allow');
    expect(decide('commands', { binary: '/usr/bin/curl' }, p).action).toBe('block');
  });
});
