/**
 * The Ansible role: ansible-lint (production profile) and a check-mode run against localhost with a real
 * `leash apply --dry-run`, through scripts/check-deploy.sh, which fails if check mode wrote any file.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('deploy/ansible', () => {
  it('passes ansible-lint and a check-mode run against localhost that changes nothing', () => {
    for (const b of ['ansible-lint', 'ansible-playbook'])
      expect(spawnSync('sh', ['-c', `command -v ${b}`]).status, `${b} is not installed (scripts/install-deps.sh)`).toBe(
        0,
      );
    const r = spawnSync(path.join(root, 'scripts/check-deploy.sh'), { encoding: 'utf8', timeout: 600_000 });
    expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
    // ansible-lint prints its summary on stderr, coloured even without a terminal: read it without the colours.
    const lint = `${r.stdout}\n${r.stderr}`.replace(/\x1b\[[0-9;]*m/g, '');
    expect(lint).toMatch(/Passed with production profile/);
    expect(r.stdout).toMatch(/TASK \[leash : Dry-run the profiles and bindings\]\s*\*+\s*changed: \[localhost\]/);
    expect(r.stdout).toContain('check-deploy: ok');
  }, 620_000);
});
