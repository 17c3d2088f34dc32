import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GATE_DEFAULTS, type OperationRuleSpec } from '../../../src/tools/judge/fields.js';
import { fromPlain } from '../../../src/formats/json.js';
import { GATE_ENGINE } from '../../../src/tools/judge/compile.js';
import { compileGatePolicy, GatePolicyError, type ToolsGatePolicy } from '../../../src/tools/judge/compile.js';
import { askUnavailable, judgeRequest } from '../../../src/tools/judge/decide.js';
import { MAPPINGS, mappingForServer } from '../../../src/tools/judge/operations/mappings.js';
import { normalizeCall } from '../../../src/tools/judge/operations/normalize.js';
import { ServerModel } from '../../../src/tools/judge/operations/model.js';
import { gitOperation } from '../../../src/tools/judge/operations/git.js';
import { compileRules, decideAction } from '../../../src/tools/judge/operations/rules.js';
import { classifySql } from '../../../src/tools/judge/operations/sql.js';

const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'leash-ops-')));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
const ws = path.join(root, 'ws');
fs.mkdirSync(path.join(ws, 'src'), { recursive: true });
fs.mkdirSync(path.join(ws, 'deep', 'er'), { recursive: true });
fs.writeFileSync(path.join(root, 'outside.txt'), 'x');
fs.symlinkSync(path.join(root, 'outside.txt'), path.join(ws, 'link'));
fs.symlinkSync(path.join(ws, 'deep', 'er'), path.join(ws, 'down'));
// A server rooted at the workspace: where the calls' relative paths land (operations/model.ts).
const ctx = { workspace: ws, home: '/home/agent', model: ServerModel.rootedAt(ws) };
const FS = MAPPINGS.get('filesystem')!;
const call = (tool: string, args: unknown, table = FS) => normalizeCall(tool, fromPlain(args), table, ctx);

describe('mapping tables', () => {
  it('are selected by the server name each names', () => {
    expect(mappingForServer('secure-filesystem-server')?.id).toBe('filesystem');
    expect(mappingForServer('mcp-git')?.id).toBe('git');
    expect(mappingForServer('mcp-fetch')?.id).toBe('fetch');
    expect(mappingForServer('leash-terminal')?.id).toBe('terminal');
    expect(mappingForServer('something-else')).toBeNull();
    for (const m of MAPPINGS.values()) expect(m.version).toBeGreaterThanOrEqual(1);
  });
});

describe('the normaliser', () => {
  it('makes paths absolute against the workspace and resolves ..', () => {
    expect(call('read_text_file', { path: 'src/a.ts' })).toMatchObject({
      operation: 'fs.read',
      paths: [path.join(ws, 'src/a.ts')],
      mapping: 'filesystem@1',
    });
    expect(call('read_text_file', { path: '../outside.txt' }).paths).toEqual([path.join(root, 'outside.txt')]);
    expect(call('read_text_file', { path: `${ws}/src/../../outside.txt` }).paths).toEqual([
      path.join(root, 'outside.txt'),
    ]);
    expect(call('write_file', { path: '~/notes', content: '' })).toMatchObject({
      operation: 'fs.write',
      paths: ['/home/agent/notes'],
    });
  });

  it('resolves existing symlinks, and keeps both readings when the kernel and a lexical server differ', () => {
    expect(call('read_text_file', { path: 'link' }).paths).toEqual([path.join(root, 'outside.txt')]);
    // down -> deep/er: the kernel reads down/../.. as ws, a lexical server as root.
    const a = call('read_text_file', { path: 'down/../../x' });
    expect(a.paths.sort()).toEqual([path.join(root, 'x'), path.join(ws, 'x')].sort());
  });

  it('reads every path of a multi-file call, and both ends of a move', () => {
    expect(call('read_multiple_files', { paths: ['a', 'link'] }).paths).toEqual([
      path.join(ws, 'a'),
      path.join(root, 'outside.txt'),
    ]);
    expect(call('move_file', { source: 'a', destination: '/tmp/b' })).toMatchObject({
      operation: 'fs.write',
      paths: [path.join(ws, 'a'), '/tmp/b'],
    });
  });

  it('is unknown for a tool not in the table, a missing or mistyped argument, or no table', () => {
    expect(call('delete_everything', {}).operation).toBe('unknown');
    expect(call('read_text_file', {}).operation).toBe('unknown');
    expect(call('read_text_file', { path: 7 }).operation).toBe('unknown');
    expect(call('read_multiple_files', { paths: [] }).operation).toBe('unknown');
    expect(call('read_text_file', { path: 'a\u0000b' }).operation).toBe('unknown');
    expect(normalizeCall('read_text_file', fromPlain({ path: 'a' }), null, ctx).operation).toBe('unknown');
    // Prototype names are not tools.
    expect(call('constructor', {}).operation).toBe('unknown');
  });

  it('parses fetch URLs into hosts and methods; an invalid or non-http URL is unknown', () => {
    const F = MAPPINGS.get('fetch')!;
    expect(call('fetch', { url: 'https://API.Example.com./x?y' }, F)).toMatchObject({
      operation: 'net.request',
      hosts: ['api.example.com'],
      methods: ['GET'],
    });
    expect(call('fetch', { url: 'not a url' }, F).operation).toBe('unknown');
    expect(call('fetch', { url: 'file:///etc/passwd' }, F).operation).toBe('unknown');
  });

  it('reads git server calls with files relative to the repository', () => {
    const G = MAPPINGS.get('git')!;
    expect(call('git_status', { repo_path: ws }, G)).toMatchObject({ operation: 'git.read', paths: [ws] });
    expect(call('git_add', { repo_path: ws, files: ['src/a.ts'] }, G)).toMatchObject({
      operation: 'git.write',
      paths: [ws, path.join(ws, 'src/a.ts')],
    });
  });

  it('reads leash terminal commands: exact argv, git classified, compound/quoted never a safe argv', () => {
    const T = MAPPINGS.get('terminal')!;
    expect(call('run_command', { command: 'npm test' }, T)).toMatchObject({
      operation: 'shell.exec',
      commands: [['npm', 'test']],
      paths: [ws],
      ambiguous: false,
    });
    expect(call('run_command', { command: 'git status --short', cwd: 'src' }, T)).toMatchObject({
      operation: 'git.read',
      paths: [path.join(ws, 'src')],
    });
    expect(call('run_command', { command: 'git push origin main' }, T).operation).toBe('git.remote');
    expect(call('run_command', { command: 'git commit -m x' }, T).operation).toBe('git.write');
    for (const cmd of ['npm test && rm -rf /', 'ls | sh', 'echo "a b"', "echo 'x'", 'echo a\\ b', 'ls\nrm x']) {
      const a = call('run_command', { command: cmd }, T);
      expect(a, cmd).toMatchObject({ operation: 'shell.exec', ambiguous: true, commands: [] });
    }
    const amb = call('run_command', { command: 'git -c core.pager=sh log' }, T);
    expect(amb).toMatchObject({
      operation: 'shell.exec',
      ambiguous: true,
      commands: [['git', '-c', 'core.pager=sh', 'log']],
    });
  });

  it.each([
    [['git', 'status'], 'git.read'],
    [['git', 'log', '--oneline'], 'git.read'],
    [['git', 'branch'], 'git.read'],
    [['git', 'branch', '-a'], 'git.read'],
    [['git', 'branch', 'topic'], 'git.write'],
    [['git', 'stash', 'list'], 'git.read'],
    [['git', 'stash'], 'git.write'],
    [['git', 'fetch'], 'git.remote'],
    [['git', 'diff', '--output=/etc/x'], null],
    [['git', 'diff', '--ext-diff'], null],
    [['git', '-C', '/', 'status'], null],
    [['git', 'config', 'core.sshCommand', 'sh'], null],
    [['git', 'my-alias'], null],
    [['git'], null],
  ])('git %j is %s', (argv, op) => {
    expect(gitOperation(argv)).toBe(op);
  });
});

const rules = (specs: OperationRuleSpec[], def: 'allow' | 'deny' | 'ask' = 'deny') => {
  const problems: string[] = [];
  const c = compileRules(specs, def, { workspace: ws, home: '/home/agent' }, problems);
  expect(problems).toEqual([]);
  return c;
};

describe('rules over operations', () => {
  const r = rules([
    { id: 'allow-ws-read', effect: 'allow', operations: ['fs.read'], resources: ['${workspace}/**'] },
    { id: 'deny-dotenv', effect: 'deny', operations: ['fs.*'], resources: ['**/.env'] },
    { id: 'ask-writes', effect: 'ask', operations: ['fs.write'], resources: ['${workspace}'] },
    { id: 'tests', effect: 'allow', operations: ['shell.exec'], commands: [['npm', 'test']] },
    { id: 'npx', effect: 'allow', operations: ['shell.exec'], commands: [['npx', '**']] },
    { id: 'api', effect: 'allow', operations: ['net.request'], hosts: ['*.example.com'], methods: ['GET'] },
  ]);
  const T = MAPPINGS.get('terminal')!;
  const F = MAPPINGS.get('fetch')!;

  it('first match allows; every matching deny wins over an earlier allow', () => {
    expect(decideAction(call('read_text_file', { path: 'src/a' }), r)).toMatchObject({
      effect: 'allow',
      rule: 'allow-ws-read',
    });
    expect(decideAction(call('read_text_file', { path: 'src/.env' }), r)).toMatchObject({
      effect: 'deny',
      rule: 'deny-dotenv',
      matched: ['allow-ws-read', 'deny-dotenv'],
    });
    expect(decideAction(call('write_file', { path: 'x', content: '' }), r)).toMatchObject({
      effect: 'ask',
      rule: 'ask-writes',
    });
  });

  it('judges a multi-resource call as a unit: allow needs all, deny needs one', () => {
    expect(decideAction(call('read_multiple_files', { paths: ['a', 'b'] }), r).effect).toBe('allow');
    expect(decideAction(call('read_multiple_files', { paths: ['a', '../outside.txt'] }), r)).toMatchObject({
      effect: 'deny',
      reason: 'operation_default_denied',
    });
    expect(decideAction(call('read_multiple_files', { paths: ['a', 'link'] }), r).effect).toBe('deny');
    expect(decideAction(call('read_multiple_files', { paths: ['a', 'x/.env'] }), r).rule).toBe('deny-dotenv');
    // A kernel/lexical split: one reading outside is enough to fail the allow.
    expect(decideAction(call('read_text_file', { path: 'down/../../outside.txt' }), r).effect).toBe('deny');
  });

  it('matches exact argv, * and a final **, hosts and methods', () => {
    expect(decideAction(call('run_command', { command: 'npm test' }, T), r).rule).toBe('tests');
    expect(decideAction(call('run_command', { command: 'npm test --watch' }, T), r).effect).toBe('deny');
    expect(decideAction(call('run_command', { command: 'npx vitest run' }, T), r).rule).toBe('npx');
    expect(decideAction(call('fetch', { url: 'https://a.example.com/' }, F), r).rule).toBe('api');
    expect(decideAction(call('fetch', { url: 'https://example.com/' }, F), r).effect).toBe('deny');
  });

  it('never gives an unknown or ambiguous call the default allow', () => {
    const open = rules([{ id: 'reads', effect: 'allow', operations: ['fs.read'] }], 'allow');
    expect(decideAction(call('read_text_file', { path: 'a' }), open).effect).toBe('allow');
    expect(decideAction(call('write_file', { path: 'a', content: '' }), open)).toMatchObject({
      effect: 'allow',
      reason: 'operation_default_allowed',
    });
    expect(decideAction(call('mystery', {}), open)).toMatchObject({ effect: 'ask', reason: 'operation_unsure' });
    expect(decideAction(call('run_command', { command: 'a && b' }, T), open)).toMatchObject({ effect: 'ask' });
    // An explicit rule can still authorise it.
    const explicit = rules([{ id: 'u', effect: 'allow', operations: ['unknown'] }], 'deny');
    expect(decideAction(call('mystery', {}), explicit).effect).toBe('allow');
  });

  it('a resources rule never matches a call without paths', () => {
    const x = rules([{ id: 'a', effect: 'allow', resources: ['/**'] }]);
    expect(decideAction(call('list_allowed_directories', {}), x).effect).toBe('deny');
  });

  it('refuses unknown operations and variables, relative resources, duplicate ids, impossible combinations', () => {
    const problems: string[] = [];
    compileRules(
      [
        { id: 'a', effect: 'allow', operations: ['fs.reed'] },
        { id: 'a', effect: 'allow', resources: ['${wrkspace}/x'] },
        { id: 'b', effect: 'allow', resources: ['relative/x'] },
        { id: 'c', effect: 'allow', operations: ['fs.read'], hosts: ['example.com'] },
        { id: 'd', effect: 'allow', operations: ['net.request'], commands: [['ls']] },
        { id: 'e', effect: 'allow', operations: ['net.request'], resources: ['/x'] },
        { id: 'f', effect: 'allow', operations: ['shell.exec'], commands: [['**', 'x']] },
      ],
      'deny',
      { workspace: ws, home: '/h' },
      problems,
    );
    expect(problems.map((p) => p.split(':')[0])).toEqual([
      'tools.rules.0.operations',
      'tools.rules.1.id',
      'tools.rules.1.resources.0',
      'tools.rules.2.resources.0',
      'tools.rules.3',
      'tools.rules.4',
      'tools.rules.5',
      'tools.rules.6.commands.0',
    ]);
  });
});

describe('the gate judgment with rules', () => {
  const base: ToolsGatePolicy = {
    mode: 'whitelist',
    allow: [],
    deny: ['nuke'],
    inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' },
    ...GATE_DEFAULTS,
    rules: [{ id: 'ws-read', effect: 'allow', operations: ['fs.read'], resources: ['${workspace}/**'] }],
    mapping: 'filesystem',
  };
  const p = compileGatePolicy(base, 'closed', GATE_ENGINE, { workspace: ws, home: '/h' });
  const j = (name: string, args: unknown) =>
    judgeRequest('tools/call', fromPlain({ name, arguments: args }), p, {
      serverName: null,
      model: ServerModel.rootedAt(ws),
    });

  it('allows by rule without a name allow entry; deny entries and inspection still apply', () => {
    expect(j('read_text_file', { path: 'a' })).toMatchObject({
      action: 'allow',
      verdict: { reason: 'operation_allowed', rule: 'ws-read' },
      op: { action: { operation: 'fs.read' } },
    });
    expect(j('nuke', {})).toMatchObject({ action: 'deny', reason: 'deny_entry' });
    expect(j('read_text_file', { path: 'a', token: 'ghp_' + 'a'.repeat(36) })).toMatchObject({
      action: 'deny',
      reason: 'inspect_secrets',
    });
  });

  it('an ask rule, the ask default and an unknown call are asks (held by the service), refused approval_unavailable without an approver', () => {
    const w = j('write_file', { path: 'a', content: 'x' });
    expect(w).toMatchObject({ action: 'ask', reason: 'operation_ask', rule: null, persist: null });
    expect(w.action === 'ask' && askUnavailable(w)).toMatchObject({
      action: 'deny',
      code: -32001,
      reason: 'approval_unavailable',
      rule: null,
    });
    const u = j('unlisted', {});
    expect(u).toMatchObject({ action: 'ask', rule: null, op: { action: { operation: 'unknown' } } });
    expect(u.action === 'ask' && askUnavailable(u)).toMatchObject({ action: 'deny', reason: 'approval_unavailable' });
  });

  it('selects the table by the server name when mapping is auto', () => {
    const auto = compileGatePolicy({ ...base, mapping: 'auto' }, 'closed', GATE_ENGINE, { workspace: ws, home: '/h' });
    const call = fromPlain({ name: 'read_text_file', arguments: { path: 'a' } });
    expect(judgeRequest('tools/call', call, auto, { serverName: null, model: ServerModel.rootedAt(ws) })).toMatchObject(
      {
        action: 'ask',
        op: { action: { operation: 'unknown' } },
      },
    );
    expect(
      judgeRequest('tools/call', call, auto, {
        serverName: 'secure-filesystem-server',
        model: ServerModel.rootedAt(ws),
      }),
    ).toMatchObject({
      action: 'allow',
    });
  });

  it('a policy with a bad rule is refused whole', () => {
    expect(() =>
      compileGatePolicy(
        { ...base, rules: [{ id: 'x', effect: 'allow', operations: ['nope'] }] },
        'closed',
        GATE_ENGINE,
      ),
    ).toThrow(GatePolicyError);
  });
});

describe('SQL text (sqlite and postgres tables)', () => {
  it.each([
    ['SELECT * FROM t', 'db.read', false],
    ['  select a from t where b = 1 ;  ', 'db.read', false],
    ["SELECT * FROM t WHERE x = 'drop; delete -- /*'", 'db.read', false],
    ['WITH x AS (SELECT 1) SELECT * FROM x', 'db.read', false],
    ['EXPLAIN SELECT 1', 'db.read', false],
    ['INSERT INTO t VALUES (1)', 'db.write', false],
    ['drop table t', 'db.write', false],
    ['COMMIT; DROP TABLE t', 'db.write', true],
    ['SELECT 1; SELECT 2', 'db.write', true],
    ['WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d', 'db.write', true],
    ['SELECT * INTO copy FROM t', 'db.write', true],
    ['EXPLAIN ANALYZE DELETE FROM t', 'db.write', true],
    ['SELECT 1 -- ; DROP TABLE t', 'db.write', true],
    ['SELECT /* x */ 1', 'db.write', true],
    ["SELECT pg_read_file('/etc/passwd')", 'db.write', true],
    ['SELECT lo_export(1, $$/tmp/x$$)', 'db.write', true],
    ["SELECT 'unterminated", 'db.write', true],
    ['', 'db.write', true],
    ['VACUUMX', 'db.write', true],
  ])('%j is %s (ambiguous %s)', (sql, op, amb) => {
    expect(classifySql(sql)).toMatchObject({ operation: op, ambiguous: amb });
  });

  it('a read tool whose text writes is a write; a write tool stays a write; a missing argument is unknown', () => {
    const SQ = MAPPINGS.get('sqlite')!;
    expect(call('read_query', { query: 'SELECT 1' }, SQ)).toMatchObject({ operation: 'db.read', ambiguous: false });
    expect(call('read_query', { query: 'DELETE FROM t' }, SQ)).toMatchObject({ operation: 'db.write' });
    expect(call('write_query', { query: 'SELECT 1' }, SQ)).toMatchObject({ operation: 'db.write' });
    expect(call('read_query', {}, SQ).operation).toBe('unknown');
    expect(call('query', { sql: 'SELECT 1; DROP TABLE t' }, MAPPINGS.get('postgres')!)).toMatchObject({
      operation: 'db.write',
      ambiguous: true,
    });
  });

  it('a rule with resources over db operations only is an impossible combination', () => {
    const problems: string[] = [];
    compileRules(
      [{ id: 'x', effect: 'allow', operations: ['db.*'], resources: ['/srv/**'] }],
      'deny',
      { workspace: ws, home: '/h' },
      problems,
    );
    expect(problems).toHaveLength(1);
  });

  it('an ambiguous query never inherits a default allow', () => {
    const open = rules([], 'allow');
    const PG = MAPPINGS.get('postgres')!;
    expect(decideAction(call('query', { sql: 'SELECT 1' }, PG), open).effect).toBe('allow');
    expect(decideAction(call('query', { sql: 'COMMIT; DROP TABLE t' }, PG), open)).toMatchObject({
      effect: 'ask',
      reason: 'operation_unsure',
    });
  });
});

describe('the GitHub table', () => {
  it('reads each tool as its REST method against api.github.com', () => {
    const GH = MAPPINGS.get('github')!;
    expect(mappingForServer('github-mcp-server')?.id).toBe('github');
    expect(call('get_file_contents', { owner: 'o', repo: 'r', path: 'a' }, GH)).toMatchObject({
      operation: 'net.request',
      hosts: ['api.github.com'],
      methods: ['GET'],
    });
    expect(call('merge_pull_request', { owner: 'o', repo: 'r', pull_number: 1 }, GH).methods).toEqual(['PUT']);
    expect(call('delete_repository', {}, GH).operation).toBe('unknown');
  });
});

describe('the rule index', () => {
  // The index only narrows which rules are tried: the decision must be the one a scan of every
  // rule gives, for rules under one top directory, under several, under none, and for paths
  // anywhere (a CompiledRules without its index is judged by the scan).
  const specs: OperationRuleSpec[] = [
    { id: 'd-a', effect: 'deny', operations: ['fs.read'], resources: ['/a/secret/**'] },
    { id: 'any-env', effect: 'deny', operations: ['fs.*'], resources: ['**/.env'] },
    { id: 'a', effect: 'allow', operations: ['fs.read'], resources: ['/a/**'] },
    { id: 'pre', effect: 'ask', operations: ['fs.read'], resources: ['/pr*/**'] },
    { id: 'two', effect: 'allow', operations: ['fs.read'], resources: ['/b/**', '/c/**'] },
    { id: 'exact', effect: 'allow', operations: ['fs.read'], resources: ['/d'] },
    { id: 'all-ops', effect: 'deny', resources: ['/e/**'] },
    { id: 'no-res', effect: 'ask', operations: ['fs.write'] },
  ];
  const c = rules(specs);
  const scan = { rules: c.rules, default: c.default };
  const act = (operation: 'fs.read' | 'fs.write', paths: string[]) => ({
    tool: 't',
    mapping: null,
    operation,
    paths,
    commands: [],
    hosts: [],
    methods: [],
    ambiguous: false,
  });
  it.each([
    [['/a/x']],
    [['/a/secret/k']],
    [['/a/x', '/b/y']],
    [['/b/y', '/c/z']],
    [['/a/.env']],
    [['/proj/x']],
    [['/d']],
    [['/d/x']],
    [['/e/x']],
    [['/']],
    [['/zz/x', '/a/x']],
  ])('%j is judged as a full scan judges it', (paths) => {
    for (const op of ['fs.read', 'fs.write'] as const)
      expect(decideAction(act(op, paths), c)).toEqual(decideAction(act(op, paths), scan));
  });
  it('finds the one rule among a thousand under other tops', () => {
    const many: OperationRuleSpec[] = [];
    for (let i = 0; i < 999; i++)
      many.push({ id: `p${i}`, effect: 'allow', operations: ['fs.read'], resources: [`/p${i}/**`] });
    many.push({ id: 'srv', effect: 'allow', operations: ['fs.read'], resources: ['/srv/**'] });
    const m = rules(many);
    expect(decideAction(act('fs.read', ['/srv/x']), m)).toMatchObject({
      effect: 'allow',
      rule: 'srv',
      matched: ['srv'],
    });
    expect(decideAction(act('fs.read', ['/p7/x', '/srv/y']), m).effect).toBe('deny');
  });
});

describe('paths the walk meets', () => {
  it('a dangling link, a file in the middle and a loop resolve as the kernel would name them', () => {
    fs.symlinkSync(path.join(root, 'nowhere'), path.join(ws, 'dangling'));
    fs.symlinkSync(path.join(ws, 'loop'), path.join(ws, 'loop'));
    fs.writeFileSync(path.join(ws, 'file'), 'x');
    expect(call('read_text_file', { path: 'dangling/x' }).paths).toEqual([path.join(ws, 'dangling/x')]);
    expect(call('read_text_file', { path: 'file/x' }).paths).toEqual([path.join(ws, 'file/x')]);
    expect(call('read_text_file', { path: 'loop/x' }).paths).toEqual([path.join(ws, 'loop/x')]);
    // A link to a directory outside, then `..`: the lexical reading stays inside, the kernel's
    // leaves — both are resources.
    fs.symlinkSync(path.join(root, 'o2', 'in'), path.join(ws, 'out'));
    fs.mkdirSync(path.join(root, 'o2', 'in'), { recursive: true });
    expect(call('read_text_file', { path: 'out/../src/a' }).paths).toEqual([
      path.join(ws, 'src/a'),
      path.join(root, 'o2', 'src/a'),
    ]);
  });

  it('a write through a dangling symlink is judged at its target too; a read is not (#38)', () => {
    fs.mkdirSync(path.join(root, 'l38-out'), { recursive: true });
    fs.symlinkSync(path.join(root, 'l38-out', 'planted'), path.join(ws, 'l38-dangling'));
    const w = call('write_file', { path: 'l38-dangling', content: 'x' });
    expect(w.paths).toEqual([path.join(ws, 'l38-dangling'), path.join(root, 'l38-out', 'planted')]);
    const allowWs = rules([{ id: 'ws', effect: 'allow', operations: ['fs.*'], resources: [`${ws}/**`] }]);
    expect(decideAction(w, allowWs).effect).toBe('deny');
    expect(call('read_text_file', { path: 'l38-dangling' }).paths).toEqual([path.join(ws, 'l38-dangling')]);
  });

  it('a relative path with no model, or a table that cannot say where it lands, is unknown (#38)', () => {
    const noModel = { workspace: ws, home: '/home/agent' };
    expect(normalizeCall('read_text_file', fromPlain({ path: 'a' }), FS, noModel)).toMatchObject({
      operation: 'unknown',
    });
    // An absolute path needs no model.
    expect(normalizeCall('read_text_file', fromPlain({ path: `${ws}/a` }), FS, noModel).operation).toBe('fs.read');
    // A server-filesystem model whose command line it could not read: unknown until roots or its own answer.
    const m = new ServerModel(['/bin/sh', '-c', 'cd /x && exec mcp-server-filesystem .'], '/');
    const ctx2 = { ...noModel, model: m };
    expect(normalizeCall('read_text_file', fromPlain({ path: 'a' }), FS, ctx2).operation).toBe('unknown');
    m.serverDirs(`Allowed directories:\n${ws}`, m.epoch);
    expect(normalizeCall('read_text_file', fromPlain({ path: 'a' }), FS, ctx2).paths).toEqual([path.join(ws, 'a')]);
    // Roots in flight: judged under the old list and the new one until the server names the new one.
    m.clientRoots([{ uri: `file://${root}` }]);
    expect(normalizeCall('read_text_file', fromPlain({ path: 'a' }), FS, ctx2).paths).toEqual([
      path.join(ws, 'a'),
      path.join(root, 'a'),
    ]);
    m.serverDirs(`Allowed directories:\n${root}`, m.epoch);
    expect(normalizeCall('read_text_file', fromPlain({ path: 'a' }), FS, ctx2).paths).toEqual([path.join(root, 'a')]);
  });
});
