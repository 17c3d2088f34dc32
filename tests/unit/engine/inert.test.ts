import { describe, expect, it } from 'vitest';
import { entryProblem, inertEntries } from '../../../src/engine/index.js';

describe('inertEntries', () => {
  it('walks every surface and list of a fragment and grades deny as critical', () => {
    const found = inertEntries({
      network: { allow: ['github.com', 'http://x.com'], deny: ['user@evil.com', 'evil.com'] },
      filesystem: { deny: ['~/secrets', '/etc'] },
      commands: { allow: ['./build.sh'], deny: ['rm -rf'] },
      tools: { allow: ['\u200b'] },
    });
    expect(found.map((f) => [f.surface, f.list, f.entry, f.problem.code, f.severity])).toEqual([
      ['network', 'allow', 'http://x.com', 'url', 'warning'],
      ['network', 'deny', 'user@evil.com', 'userinfo', 'critical'],
      ['filesystem', 'deny', '~/secrets', 'home_path', 'critical'],
      ['commands', 'allow', './build.sh', 'relative_path', 'warning'],
      ['commands', 'deny', 'rm -rf', 'arguments', 'critical'],
      ['tools', 'allow', '\u200b', 'empty', 'warning'],
    ]);
  });

  it.each([null, undefined, 42, 'x', [], {}, { network: 'x' }, { network: { allow: 'github.com' } }, { user: 'fido' }])(
    'finds nothing (and does not throw) in %j',
    (fragment) => {
      expect(inertEntries(fragment)).toEqual([]);
    },
  );

  it('reports a non-string entry', () => {
    expect(inertEntries({ filesystem: { allow: [3] } })[0]?.problem.code).toBe('not_a_string');
  });

  it('reports nothing for a clean policy', () => {
    expect(
      inertEntries({
        fail_mode: 'closed',
        network: { mode: 'whitelist', allow: ['github.com', '10.0.0.0/8', '[::1]:443'], deny: [] },
        filesystem: { mode: 'whitelist', allow: ['/home/fido/work', '/tmp/**'], deny: [] },
        commands: { mode: 'blacklist', allow: [], deny: ['ssh', '/usr/bin/curl'] },
        tools: { mode: 'whitelist', allow: ['read_file'], deny: [], inspect: { secrets: 'block' } },
      }),
    ).toEqual([]);
  });

  it.each([
    ['network', 'a b', 'whitespace'],
    ['filesystem', 'relative', 'relative_path'],
    ['commands', 'bin/x', 'relative_path'],
    ['tools', '', 'empty'],
  ] as const)('entryProblem(%s, %j) is %s', (surface, entry, code) => {
    expect(entryProblem(surface, entry)?.code).toBe(code);
  });
});
