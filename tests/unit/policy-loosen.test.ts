import { describe, expect, it } from 'vitest';
import { configSchema } from '../../src/config/schema.js';
import type { Effective, Fragment } from '../../src/policy/fragment.js';
import { floorOf, fold } from '../../src/policy/fragment.js';
import { ackFlags, judgeOverlay, loosenings, parseAgentAck, parseToken } from '../../src/policy/loosen.js';

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
