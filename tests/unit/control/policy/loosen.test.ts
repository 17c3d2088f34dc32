import { describe, expect, it } from 'vitest';
import { configSchema } from '../../../../src/control/config/schema.js';
import type { Effective, Fragment } from '../../../../src/control/policy/fragment.js';
import { floorOf, fold } from '../../../../src/control/policy/fragment.js';
import {
  ackFlags,
  judgeOverlay,
  loosenings,
  parseAgentAck,
  parseToken,
} from '../../../../src/control/policy/loosen.js';

function floor(doc: Record<string, unknown> = {}): Effective {
  return floorOf(configSchema.parse(doc));
}

const strict = floor({
  fail_mode: 'closed',
  network: { mode: 'whitelist', allow: ['github.com'], deny: ['evil.com'], dns_resolvers: ['10.0.0.53'], udp: 'drop' },
  filesystem: { mode: 'whitelist', allow: ['/home/a'], deny: ['/home/a/.ssh'], watch: ['/srv'] },
  commands: { mode: 'blacklist', deny: ['ssh', 'curl'] },
  tools: { mode: 'whitelist', allow: ['read_file'], inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' } },
});

describe('loosening judge', () => {
  it.each<[string, Fragment, string[]]>([
    ['mode whitelist -> blacklist', { network: { mode: 'blacklist' } }, ['network.mode:blacklist']],
    [
      'a new allow entry in a whitelist',
      { network: { allow: ['github.com', 'openai.com'] } },
      ['network.allow:openai.com'],
    ],
    ['a dropped deny entry is unset.deny', { commands: { deny: ['ssh'] } }, ['commands.unset.deny:curl']],
    ['fail_mode closed -> open', { fail_mode: 'open' }, ['fail_mode:open']],
    ['inspect block -> log', { tools: { inspect: { secrets: 'log' } } }, ['tools.inspect.secrets:log']],
    ['inspect block -> allow', { tools: { inspect: { priv_esc: 'allow' } } }, ['tools.inspect.priv_esc:allow']],
    ['inspect log -> allow', { tools: { inspect: { pii: 'allow' } } }, ['tools.inspect.pii:allow']],
    ['an enforcer switched off', { enforcers: { filesystem: false } }, ['enforcers.filesystem:false']],
    ['udp drop -> allow', { network: { udp: 'allow' } }, ['network.udp:allow']],
    [
      'namespaces deny (the whitelist default) -> allow',
      { filesystem: { namespaces: 'allow' } },
      ['filesystem.namespaces:allow'],
    ],
    [
      'a DNS resolver added',
      { network: { dns_resolvers: ['10.0.0.53', '1.1.1.1'] } },
      ['network.dns_resolvers:1.1.1.1'],
    ],
    ['resolvers emptied to the system ones', { network: { dns_resolvers: [] } }, ['network.dns_resolvers:system']],
    ['a watched path dropped', { filesystem: { watch: [] } }, ['filesystem.unset.watch:/srv']],
    ['a narrower whitelist tightens', { network: { allow: [] } }, []],
    ['an extra deny tightens', { commands: { deny: ['ssh', 'curl', 'nc'] } }, []],
    ['blacklist -> whitelist tightens', { commands: { mode: 'whitelist', allow: ['git'] } }, []],
    ['inspect log -> block tightens', { tools: { inspect: { pii: 'block' } } }, []],
    ['allow entries under blacklist are never consulted', { commands: { allow: ['bash'] } }, []],
    ['an empty fragment changes nothing', {}, []],
  ])('%s', (_name, fragment, tokens) => {
    expect(judgeOverlay(strict, fragment).map((l) => l.token)).toEqual(tokens);
  });

  it('lists every loosening, not the first', () => {
    const f: Fragment = {
      fail_mode: 'open',
      network: { mode: 'blacklist', deny: [], udp: 'allow' },
      filesystem: { allow: ['/home/a', '/etc'], deny: [] },
      tools: { inspect: { secrets: 'allow' } },
      enforcers: { network: false, tools: false },
    };
    expect(judgeOverlay(strict, f).map((l) => l.token)).toEqual([
      'fail_mode:open',
      'network.mode:blacklist',
      'network.unset.deny:evil.com',
      'filesystem.allow:/etc',
      'filesystem.unset.deny:/home/a/.ssh',
      'tools.inspect.secrets:allow',
      'enforcers.network:false',
      'enforcers.tools:false',
      'network.udp:allow',
    ]);
  });

  it('says each finding in engine words', () => {
    const [l] = judgeOverlay(strict, { network: { allow: ['github.com', 'x.org'] } });
    expect(l?.words).toContain('allow_entry');
    expect(l?.words).toContain('not_allowed');
  });

  it('is symmetric to fold: what loosens one way tightens back', () => {
    const after = fold(strict, { network: { mode: 'blacklist' } });
    expect(loosenings(after, strict)).toEqual([]);
  });

  it('parses tokens and per-agent acks', () => {
    expect(parseToken('network.allow:api.x.com:443')).toEqual({ field: 'network.allow', value: 'api.x.com:443' });
    expect(parseToken('nocolon')).toBeNull();
    expect(parseAgentAck('agent:leash-iris=network.allow:openai.com')).toEqual({
      account: 'leash-iris',
      token: 'network.allow:openai.com',
    });
    expect(parseAgentAck('network.allow:openai.com')).toBeNull();
    expect(ackFlags(['a:b', "c:it's"])).toBe(`--ack 'a:b' --ack 'c:it'\\''s'`);
  });
});

describe('loosening judge: an allow entry the base already covers is no loosening', () => {
  const base = floor({
    network: { mode: 'whitelist', allow: ['github.com', 'pinned.org:443', '10.0.0.0/8'] },
    filesystem: { mode: 'whitelist', allow: ['/home/a', '/srv/*/logs'] },
    commands: { mode: 'whitelist', allow: ['git', '/usr/bin/make'] },
    tools: { mode: 'whitelist', allow: ['read_file'] },
  });
  const tokens = (f: Fragment) => loosenings(base, fold(base, f)).map((x) => x.token);
  it.each<[string, Fragment, string[]]>([
    ['a subdirectory of an allowed directory', { filesystem: { allow: ['/home/a/work'] } }, []],
    ['a sibling that only shares a prefix', { filesystem: { allow: ['/home/ab'] } }, ['filesystem.allow:/home/ab']],
    ['a path under an allowed glob', { filesystem: { allow: ['/srv/x/logs/today'] } }, []],
    ['a new glob is judged as written', { filesystem: { allow: ['/home/a/*'] } }, ['filesystem.allow:/home/a/*']],
    ['a subdomain of an allowed domain', { network: { allow: ['api.github.com'] } }, []],
    ['a lookalike domain', { network: { allow: ['evilgithub.com'] } }, ['network.allow:evilgithub.com']],
    ['a domain allowed only on one port', { network: { allow: ['pinned.org'] } }, ['network.allow:pinned.org']],
    ['an address inside an allowed CIDR', { network: { allow: ['10.1.2.3'] } }, []],
    ['an address outside it', { network: { allow: ['11.1.2.3'] } }, ['network.allow:11.1.2.3']],
    ['a path of a command allowed by basename', { commands: { allow: ['/opt/bin/git'] } }, []],
    ['a basename allowed only at one path', { commands: { allow: ['make'] } }, ['commands.allow:make']],
    ['a tool name spelled differently', { tools: { allow: ['READ_FILE'] } }, []],
  ])('%s', (_what, f, want) => {
    const keep = (s: keyof Effective & ('network' | 'filesystem' | 'commands' | 'tools')) =>
      f[s] ? { [s]: { ...f[s], allow: [...(base[s].allow as string[]), ...(f[s]!.allow ?? [])] } } : {};
    const frag = { ...keep('network'), ...keep('filesystem'), ...keep('commands'), ...keep('tools') } as Fragment;
    expect(tokens(frag)).toEqual(want);
  });
});

describe('loosening judge: the MCP gate fields and leash terminal argument rules', () => {
  const gated = floor({
    tools: {
      mode: 'whitelist',
      allow: ['read_file', 'run', 'ping'],
      strict_args: true,
      hide_denied: true,
      deny_methods: ['resources/*', 'sampling/*'],
      policed_methods: ['tools/call', 'prompts/get'],
      args: {
        read_file: { allow: { path: ['^/work/'] }, deny: ['\\.env$', { type: 'string', pattern: 'id_rsa' }] },
        run: { allow: '*', deny: { cmd: ['^git push --force'] } },
      },
    },
    commands: { mode: 'whitelist', allow: ['git'], args: { git: { deny_args: ['push --force', 'push -f'] } } },
  });
  const readFile = gated.tools.args.read_file!;

  it.each<[string, Fragment, string[]]>([
    ['strict_args true -> false', { tools: { strict_args: false } }, ['tools.strict_args:false']],
    ['hide_denied true -> false', { tools: { hide_denied: false } }, ['tools.hide_denied:false']],
    ['a denied method dropped', { tools: { deny_methods: ['sampling/*'] } }, ['tools.unset.deny_methods:resources/*']],
    [
      'a policed method dropped',
      { tools: { policed_methods: ['tools/call'] } },
      ['tools.unset.policed_methods:prompts/get'],
    ],
    [
      'an args deny rule dropped',
      { tools: { args: { ...gated.tools.args, read_file: { ...readFile, deny: ['\\.env$'] } } } },
      ['tools.args.unset.deny:read_file ** {"pattern":"id_rsa","type":"string"}'],
    ],
    [
      "a tool's whole args entry dropped (deny rules go with it; strict_args keeps it bare)",
      { tools: { args: { run: gated.tools.args.run! } } },
      [
        'tools.args.unset.deny:read_file ** \\.env$',
        'tools.args.unset.deny:read_file ** {"pattern":"id_rsa","type":"string"}',
      ],
    ],
    [
      'an allow rule added to a path',
      { tools: { args: { ...gated.tools.args, read_file: { ...readFile, allow: { path: ['^/work/', '^/etc/'] } } } } },
      ['tools.args.allow:read_file path ^/etc/'],
    ],
    [
      'allow rules widened to *',
      { tools: { args: { ...gated.tools.args, read_file: { ...readFile, allow: '*' } } } },
      ['tools.args.allow:read_file *'],
    ],
    [
      'allow rules for a bare tool under strict_args',
      { tools: { args: { ...gated.tools.args, ping: { allow: { host: ['^localhost$'] } } } } },
      ['tools.args.allow:ping host ^localhost$'],
    ],
    [
      'a deny_args pattern dropped',
      { commands: { args: { git: { deny_args: ['push --force'] } } } },
      ['commands.args.unset.deny_args:git push -f'],
    ],
    [
      'a whole commands.args entry dropped',
      { commands: { args: {} } },
      ['commands.args.unset.deny_args:git push --force', 'commands.args.unset.deny_args:git push -f'],
    ],
    ['strict_args false -> true tightens', { tools: { strict_args: true } }, []],
    ['an extra args deny rule tightens', { tools: { args: { ...gated.tools.args, ping: { deny: ['x'] } } } }, []],
    [
      'an allow rule removed tightens',
      { tools: { args: { ...gated.tools.args, read_file: { ...readFile, allow: {} } } } },
      [],
    ],
    ['an extra denied method tightens', { tools: { deny_methods: ['resources/*', 'sampling/*', 'x/*'] } }, []],
    [
      'an extra deny_args pattern tightens',
      { commands: { args: { git: { deny_args: ['push --force', 'push -f', 'reset --hard'] } } } },
      [],
    ],
    ['log_args decides nothing', { tools: { log_args: 'all' } }, []],
    [
      'a respelt args key names the same tool',
      { tools: { args: { run: gated.tools.args.run!, READ_FILE: readFile } } },
      [],
    ],
  ])('%s', (_name, fragment, tokens) => {
    expect(judgeOverlay(gated, fragment).map((l) => l.token)).toEqual(tokens);
  });

  it('without strict_args, allow rules removed let the tool take anything; adding them tightens', () => {
    const loose = fold(gated, { tools: { strict_args: false } });
    const { allow: _a, ...noAllow } = readFile;
    expect(
      judgeOverlay(loose, { tools: { args: { ...loose.tools.args, read_file: noAllow } } }).map((l) => l.token),
    ).toEqual(['tools.args.unset.allow:read_file']);
    expect(
      judgeOverlay(loose, { tools: { args: { ...loose.tools.args, ping: { allow: { host: ['^x$'] } } } } }),
    ).toEqual([]);
  });

  it('tokens round-trip through parseToken (the value may hold colons and spaces)', () => {
    for (const f of judgeOverlay(gated, { tools: { strict_args: false, args: {} }, commands: { args: {} } })) {
      expect(parseToken(f.token)).toEqual({ field: f.field, value: f.value });
    }
  });
});

describe('loosening judge: rules over operations', () => {
  const ruled = floor({
    tools: {
      default: 'deny',
      workspace: '/work',
      rules: [
        { id: 'no-env', effect: 'deny', operations: ['fs.*'], resources: ['**/.env'] },
        { id: 'read', effect: 'allow', operations: ['fs.read'], resources: ['${workspace}/**'] },
      ],
    },
  });
  const [noEnv, read] = ruled.tools.rules as [never, never];

  it.each<[string, Fragment, string[]]>([
    [
      'an allow rule widened',
      { tools: { rules: [noEnv, { id: 'read', effect: 'allow', operations: ['fs.read'], resources: ['/**'] }] } },
      ['tools.rules:read'],
    ],
    ['a deny rule removed', { tools: { rules: [read] } }, ['tools.unset.rules:no-env']],
    ['default deny -> ask', { tools: { default: 'ask' } }, ['tools.default:ask']],
    ['redaction off', { tools: { redact_output: false } }, ['tools.redact_output:false']],
    ['the workspace moved', { tools: { workspace: '/' } }, ['tools.workspace:/']],
    [
      'an extra deny rule tightens',
      { tools: { rules: [noEnv, read, { id: 'x', effect: 'deny', operations: ['fs.write'] }] } },
      [],
    ],
    ['default deny stays', { tools: { default: 'deny' } }, []],
  ])('%s', (_name, fragment, tokens) => {
    expect(judgeOverlay(ruled, fragment).map((l) => l.token)).toEqual(tokens);
  });
});

describe('loosening judge: ask entries (docs/approvals.md)', () => {
  const wl = floor({ network: { mode: 'whitelist', allow: ['github.com'], deny: ['evil.com'] } });
  const bl = floor({ filesystem: { mode: 'blacklist', ask: ['/srv/secret'] } });

  it('a new ask entry in a whitelist is a loosening (an approver may pass what was blocked)', () => {
    expect(judgeOverlay(wl, { network: { ask: ['api.lab'] } }).map((f) => f.token)).toEqual(['network.ask:api.lab']);
  });

  it('an ask replacing a deny needs consent for both: the deny dropped and the ask added', () => {
    const tokens = judgeOverlay(wl, { network: { deny: [], ask: ['evil.com'] } }).map((f) => f.token);
    expect(tokens.sort()).toEqual(['network.ask:evil.com', 'network.unset.deny:evil.com']);
  });

  it('an ask entry an allow entry already covers widens nothing', () => {
    expect(judgeOverlay(wl, { network: { ask: ['api.github.com'] } })).toEqual([]);
  });

  it('an ask entry dropped from a blacklist is a loosening; one added is not', () => {
    expect(judgeOverlay(bl, { filesystem: { ask: [] } }).map((f) => f.token)).toEqual([
      'filesystem.unset.ask:/srv/secret',
    ]);
    expect(judgeOverlay(bl, { filesystem: { ask: ['/srv/secret', '/srv/more'] } })).toEqual([]);
  });

  it('an ask entry dropped from a whitelist is a tightening (what was asked is now blocked)', () => {
    const w = floor({ tools: { mode: 'whitelist', ask: ['run_shell'] } });
    expect(judgeOverlay(w, { tools: { ask: [] } })).toEqual([]);
  });
});
