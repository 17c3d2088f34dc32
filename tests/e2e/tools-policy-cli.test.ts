/** `leash tools policy init|check|explain|test` and `leash mcp audit` as a user runs them. */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLI, tmpdir } from './mcp-helpers.js';

const leash = (args: string[], cwd: string) => {
  const r = spawnSync(process.execPath, [CLI, ...args], { cwd, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
};

describe.skipIf(!fs.existsSync(CLI))('leash tools policy', () => {
  it('init writes a recipe and never overwrites; check passes it; test runs cases with exit 1 on a mismatch', () => {
    const d = tmpdir();
    expect(leash(['tools', 'policy', 'init', '--recipe', 'filesystem', '--policy', 'p.yaml'], d).code).toBe(0);
    const before = fs.readFileSync(path.join(d, 'p.yaml'), 'utf8');
    const again = leash(['tools', 'policy', 'init', '--policy', 'p.yaml'], d);
    expect(again.code).toBe(2);
    expect(again.err).toContain('[usage]');
    expect(fs.readFileSync(path.join(d, 'p.yaml'), 'utf8')).toBe(before);
    expect(leash(['tools', 'policy', 'check', '--policy', 'p.yaml', '--json'], d)).toMatchObject({ code: 0 });
    fs.writeFileSync(
      path.join(d, 'cases.yaml'),
      `workspace: /work/p
server: secure-filesystem-server
cases:
  - { name: inside, tool: read_text_file, arguments: { path: a.ts }, expect: allow, rule: workspace-read }
  - { name: wrong on purpose, tool: read_text_file, arguments: { path: /etc/passwd }, expect: allow }
`,
    );
    const t = leash(['tools', 'policy', 'test', '--policy', 'p.yaml', '--cases', 'cases.yaml', '--json'], d);
    expect(t.code).toBe(1);
    const j = JSON.parse(t.out) as { passed: number; failed: number };
    expect([j.passed, j.failed]).toEqual([1, 1]);
    expect(leash(['tools', 'policy', 'init', '--recipe', 'nope'], d).code).toBe(2);
  });

  it('check refuses duplicate ids, unknown variables and impossible combinations with config_invalid, exit 2', () => {
    const d = tmpdir();
    fs.writeFileSync(
      path.join(d, 'bad.yaml'),
      `tools:
  rules:
    - { id: a, effect: allow, operations: [fs.read], resources: ["\${wrkspace}/**"] }
    - { id: a, effect: allow, operations: [fs.read], hosts: [example.com] }
`,
    );
    const r = leash(['tools', 'policy', 'check', '--policy', 'bad.yaml'], d);
    expect(r.code).toBe(2);
    expect(r.err).toContain('[config_invalid]');
    expect(r.err).toContain('tools.rules.0.resources.0');
    expect(r.err).toContain('tools.rules.1.id');
    expect(r.err).toContain('tools.rules.1:');
  });

  it('explain prints the normalised action, every matching rule and the decision', () => {
    const d = tmpdir();
    leash(['tools', 'policy', 'init', '--recipe', 'filesystem', '--policy', 'p.yaml'], d);
    fs.writeFileSync(
      path.join(d, 'action.json'),
      JSON.stringify({
        server: 'secure-filesystem-server',
        tool: 'read_multiple_files',
        arguments: { paths: ['a', '.env'] },
      }),
    );
    const r = leash(
      ['tools', 'policy', 'explain', '--policy', 'p.yaml', '--action', 'action.json', '--workspace', '/w', '--json'],
      d,
    );
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({
      action: { operation: 'fs.read', paths: ['/w/a', '/w/.env'], mapping: 'filesystem@1' },
      matched: ['no-secrets-files', 'workspace-read'],
      decision: 'deny',
      reason: 'operation_denied',
      rule: 'no-secrets-files',
    });
  });
});
