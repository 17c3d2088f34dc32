import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { type Account } from '../../../../src/control/config/accounts.js';
import { loadConfig, parseConfig, parseFragment } from '../../../../src/control/config/load.js';
import { suggest } from '../../../../src/formats/problems.js';
import { configSchema, fragmentSchema } from '../../../../src/control/config/schema.js';
import { LeashError } from '../../../../src/errors.js';
import { parseProfileText } from '../../../../src/control/policy/profiles.js';

const accounts: Record<string, Account> = { fido: { name: 'fido', uid: 1234, gid: 2345, home: '/home/fido' } };
const lookup = (n: string) => accounts[n] ?? null;
const parse = (text: string) => parseConfig(text, 'test.yaml', { lookup });

function refusal(text: string): LeashError {
  try {
    parse(text);
  } catch (e) {
    if (e instanceof LeashError) return e;
    throw e;
  }
  throw new Error('expected a refusal');
}
const issues = (e: LeashError) => (e.details?.issues as { path: string; message: string }[]).map((i) => i.path);

describe('config schema', () => {
  it('defaults are secure: whitelist everywhere, fail_mode closed, UDP dropped', () => {
    const { config } = parse('user: fido\n');
    expect(config.fail_mode).toBe('closed');
    for (const s of ['network', 'filesystem', 'commands', 'tools'] as const) {
      expect(config[s]).toMatchObject({ mode: 'whitelist', allow: [], deny: [] });
    }
    expect(config.network.udp).toBe('drop');
    expect(config.tools.inspect).toEqual({ secrets: 'block', pii: 'log', priv_esc: 'block' });
    expect(config.enforcers).toEqual({ network: true, filesystem: true, tools: true });
  });

  it('accepts the example of the Leash text', () => {
    const { config, findings } = parse(`user: fido
fail_mode: closed
network:    { mode: whitelist, allow: ["github.com", "api.openai.com", "10.0.0.0/8"], deny: [] }
filesystem: { mode: whitelist, allow: ["/home/fido/work", "/tmp/fido"], deny: [] }
commands:   { mode: blacklist, allow: [], deny: ["ssh", "rm", "curl"] }
tools:      { mode: whitelist, allow: ["read_file", "search"], deny: [],
              inspect: { secrets: block, pii: log, priv_esc: block } }
logging:    { level: info, decisions: /var/log/leash/decisions.jsonl }
enforcers:  { network: true, filesystem: true, tools: true }
`);
    expect(config.network.allow).toEqual(['github.com', 'api.openai.com', '10.0.0.0/8']);
    expect(findings.map((f) => f.code)).toEqual(['commands_blacklist_evadable']);
  });

  it('the shipped default policy loads with no critical finding', () => {
    const text = fs.readFileSync(path.resolve(import.meta.dirname, '../../../../packaging/leash.default.yaml'), 'utf8');
    const { findings, config } = parse(text.replace('user: null', 'user: fido'));
    expect(findings.filter((f) => f.severity === 'critical')).toEqual([]);
    expect(config.network.mode).toBe('whitelist');
  });

  it('every field carries a description', () => {
    const visited: string[] = [];
    const walk = (schema: unknown, at: string, out: string[]) => {
      const js = schema as { description?: string; properties?: Record<string, unknown> };
      if (at) visited.push(at);
      if (at && !js.description) out.push(at);
      for (const [k, v] of Object.entries(js.properties ?? {})) walk(v, at ? `${at}.${k}` : k, out);
      return out;
    };
    // JSON Schema output keeps the descriptions of the zod schema.
    expect(walk(z.toJSONSchema(configSchema, { io: 'input' }), '', [])).toEqual([]);
    expect(visited).toEqual(
      expect.arrayContaining(['user', 'network.dns_resolvers', 'tools.inspect.pii', 'enforcers.tools']),
    );
  });
});

describe('config refusals', () => {
  it.each([
    ['network:\n  alow: [github.com]\n', 'network.alow', 'allow'],
    ['netwrok:\n  mode: whitelist\n', 'netwrok', 'network'],
    ['tools:\n  inspect:\n    secret: block\n', 'tools.inspect.secret', 'secrets'],
    ['enforcers:\n  filesytem: true\n', 'enforcers.filesytem', 'filesystem'],
    ['logging:\n  lvl: info\n', 'logging.lvl', 'level'],
  ])('refuses an unknown key with a suggestion: %j', (text, at, hint) => {
    const e = refusal(text);
    expect(e.code).toBe('config_invalid');
    expect(e.exitCode).toBe(2);
    const issue = (e.details!.issues as { path: string; message: string }[]).find((i) => i.path === at);
    expect(issue?.message).toContain(`"${hint}"`);
  });

  it('refuses an unknown key with no close match without inventing a suggestion', () => {
    const e = refusal('network:\n  zzzzzzzz: 1\n');
    expect(issues(e)).toEqual(['network.zzzzzzzz']);
    expect(suggest('zzzzzzzz', ['allow', 'deny', 'mode'])).toBeNull();
  });

  it.each([
    ['user: fido\nuser: rex\n', 'user'],
    ['network:\n  mode: whitelist\n  mode: blacklist\n', 'network.mode'],
    ['tools:\n  inspect: { pii: log, pii: block }\n', 'tools.inspect.pii'],
  ])('refuses a duplicate key: %j', (text, at) => {
    const e = refusal(text);
    expect(e.code).toBe('config_invalid');
    expect(issues(e)).toEqual([at]);
  });

  it.each([
    ['network:\n  mode: greylist\n', 'network.mode'],
    ['network:\n  allow: github.com\n', 'network.allow'],
    ['network:\n  allow: [1]\n', 'network.allow[0]'],
    ['network:\n  dns_resolvers: [resolver.local]\n', 'network.dns_resolvers[0]'],
    ['network:\n  udp: maybe\n', 'network.udp'],
    ['filesystem:\n  watch: [relative/dir]\n', 'filesystem.watch[0]'],
    ['tools:\n  inspect: { pii: shout }\n', 'tools.inspect.pii'],
    ['logging:\n  decisions: relative.jsonl\n', 'logging.decisions'],
    ['logging:\n  level: loud\n', 'logging.level'],
    ['enforcers:\n  network: yes please\n', 'enforcers.network'],
    ['user: Fido Dog\n', 'user'],
    ['commands: [ssh]\n', 'commands'],
  ])('prints a path: message line for %j', (text, at) => {
    const e = refusal(text);
    expect(e.code).toBe('config_invalid');
    expect(issues(e)).toEqual([at]);
    expect(e.lines()[1]).toMatch(new RegExp(`^  ${at.replace(/[[\].]/g, '\\$&')}: \\S`));
  });

  it('lists every problem, not the first', () => {
    const e = refusal('network:\n  mode: greylist\n  alow: []\nlogging:\n  level: loud\n');
    expect(issues(e).sort()).toEqual(['logging.level', 'network.alow', 'network.mode']);
  });

  it('refuses YAML that does not parse with its own code', () => {
    const e = refusal('network: [\n');
    expect(e.code).toBe('config_syntax');
    expect(e.exitCode).toBe(2);
  });

  it('refuses a document that is not a mapping', () => {
    expect(refusal('- a\n- b\n').code).toBe('config_invalid');
  });

  it.each(['clsoed', 'Closed', 'false', '0', 'opne'])('reads fail_mode typo %s as closed, with a warning', (v) => {
    const { config, findings } = parse(`user: fido\nfail_mode: ${v}\n`);
    expect(config.fail_mode).toBe('closed');
    expect(findings.map((f) => [f.code, f.severity])).toContainEqual(['fail_mode_invalid', 'warning']);
  });

  it('fail_mode open stays open without a warning', () => {
    const { config, findings } = parse('user: fido\nfail_mode: open\n');
    expect(config.fail_mode).toBe('open');
    expect(findings).toEqual([]);
  });
});

describe('loadConfig', () => {
  function tmp(): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-cfg-'));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    return dir;
  }

  it('a missing file and an invalid file are different errors', () => {
    const dir = tmp();
    const missing = (() => {
      try {
        loadConfig(path.join(dir, 'absent.yaml'));
      } catch (e) {
        return e as LeashError;
      }
    })();
    fs.writeFileSync(path.join(dir, 'bad.yaml'), 'network: { mode: greylist }\n');
    const bad = (() => {
      try {
        loadConfig(path.join(dir, 'bad.yaml'));
      } catch (e) {
        return e as LeashError;
      }
    })();
    expect(missing?.code).toBe('config_missing');
    expect(bad?.code).toBe('config_invalid');
  });

  it('a directory is unreadable, not missing', () => {
    const dir = tmp();
    expect(() => loadConfig(dir)).toThrow(expect.objectContaining({ code: 'config_unreadable' }));
  });

  it('an empty file is all defaults, with the no-user warning', () => {
    const dir = tmp();
    fs.writeFileSync(path.join(dir, 'e.yaml'), '');
    const { config, findings } = loadConfig(path.join(dir, 'e.yaml'));
    expect(config.user).toBeNull();
    expect(findings.map((f) => f.code)).toEqual(['user_unset']);
  });
});

describe('validation findings', () => {
  it.each([
    ['user: fido\nnetwork: { mode: blacklist, allow: [github.com] }\n', 'blacklist_allow_ignored', 'critical'],
    ['user: fido\ncommands: { mode: blacklist, deny: [ssh] }\n', 'commands_blacklist_evadable', 'warning'],
    ['user: fido\ncommands: { allow: [/usr/bin/python3] }\n', 'commands_interpreter_allowed', 'warning'],
    ['user: fido\ncommands: { allow: [bash] }\n', 'commands_interpreter_allowed', 'warning'],
    ['user: fido\ncommands: { allow: [git] }\n', 'commands_memfd_unguarded', 'warning'],
    ['user: fido\nnetwork: { allow: [a.com], deny: [a.com] }\n', 'entry_shadowed', 'warning'],
    ['user: ghost\n', 'user_unknown', 'critical'],
    ['fail_mode: closed\n', 'user_unset', 'warning'],
    ['user: fido\nnetwork: { deny: ["http://evil.com/x"] }\n', 'inert_deny', 'critical'],
    ['user: fido\nfilesystem: { allow: ["work/dir"] }\n', 'inert_allow', 'warning'],
  ])('%j -> %s (%s)', (text, code, severity) => {
    const { findings } = parse(text);
    expect(findings.map((f) => [f.code, f.severity])).toContainEqual([code, severity]);
  });

  it('inert entries are accepted on load and listed', () => {
    const { inert, config } = parse('user: fido\nnetwork: { allow: ["https://github.com/"] }\n');
    expect(config.network.allow).toEqual(['https://github.com/']);
    expect(inert).toEqual([
      expect.objectContaining({ surface: 'network', list: 'allow', entry: 'https://github.com/' }),
    ]);
  });

  it('a clean whitelist config has no findings', () => {
    expect(
      parse('user: fido\nnetwork: { allow: [github.com] }\ncommands: { allow: [git] }\nhost: { memfd_noexec: true }\n')
        .findings,
    ).toEqual([]);
  });

  it('commands_memfd_unguarded: only for a commands whitelist that lists programs, with the watcher on, without host.memfd_noexec', () => {
    const codes = (t: string) => parse(`user: fido\n${t}`).findings.map((f) => f.code);
    expect(codes('commands: { allow: [git] }\n')).toContain('commands_memfd_unguarded');
    expect(parse('user: fido\ncommands: { allow: [git] }\n').findings).toContainEqual(
      expect.objectContaining({ code: 'commands_memfd_unguarded', severity: 'warning', path: 'host.memfd_noexec' }),
    );
    expect(codes('commands: { allow: [git] }\nhost: { memfd_noexec: true }\n')).not.toContain(
      'commands_memfd_unguarded',
    );
    expect(codes('commands: { mode: blacklist, deny: [ssh] }\n')).not.toContain('commands_memfd_unguarded');
    expect(codes('commands: { allow: [git] }\nenforcers: { filesystem: false }\n')).not.toContain(
      'commands_memfd_unguarded',
    );
  });

  it('host is the floor only: a profile fragment that sets it is refused by the profile parser', () => {
    expect(parse('user: fido\nhost: { memfd_noexec: true }\n').config.host).toEqual({
      memfd_noexec: true,
      max_user_namespaces: false,
    });
    expect(parse('user: fido\n').config.host).toEqual({ memfd_noexec: false, max_user_namespaces: false });
    expect(issues(refusal('host: { memfd_noexec: yes-please }\n'))).toEqual(['host.memfd_noexec']);
    let err: unknown;
    try {
      parseProfileText('host: { memfd_noexec: true }\n', 'p.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({
      code: 'profile_invalid',
      details: { issues: [expect.objectContaining({ path: 'host' })] },
    });
  });

  it('criticals come first', () => {
    const { findings } = parse('network: { mode: blacklist, allow: [a.com] }\n');
    expect(findings.map((f) => f.code)).toEqual(['blacklist_allow_ignored', 'user_unset']);
  });
});

describe('fragment schema', () => {
  it('fills in nothing: a fragment carries only what it sets', () => {
    const { fragment } = parseFragment('network:\n  allow: [github.com]\n', 'p.yaml');
    expect(fragment).toEqual({ network: { allow: ['github.com'] } });
  });

  it('applies the same checks as the full schema', () => {
    expect(() => parseFragment('network:\n  alow: [x]\n', 'p.yaml')).toThrow(
      expect.objectContaining({ code: 'config_invalid' }),
    );
    expect(fragmentSchema.safeParse({ network: { mode: 'greylist' } }).success).toBe(false);
    expect(fragmentSchema.safeParse({}).success).toBe(true);
  });
});
