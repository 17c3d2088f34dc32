// `leash validate` on a commands whitelist: a program whose start the policy refuses (a library
// the filesystem whitelist denies) is named with the file and the rule; one that can start is not.
// It reads this host's real programs, loader, libraries and /etc/ld.so.cache; nothing is marked.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { lddFiles } from './helpers/fslab.js';

const CLI = path.resolve(import.meta.dirname, '../../dist/src/cli/main.js');

function validate(yaml: string): {
  code: number | null;
  findings: { code: string; entry?: string; file?: string; rule?: string | null }[];
} {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-vs-'));
  dirs.push(dir);
  const file = path.join(dir, 'leash.yaml');
  fs.writeFileSync(file, yaml);
  const r = spawnSync(process.execPath, [CLI, '--config', file, 'validate', '--json'], { encoding: 'utf8' });
  if (!r.stdout) throw new Error(`validate printed nothing: ${r.stderr}`);
  return { code: r.status, findings: (JSON.parse(r.stdout) as { findings: never[] }).findings };
}
const dirs: string[] = [];

describe('leash validate: command_cannot_start', () => {
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('warns for a program whose library the filesystem whitelist denies, not for one that can start', () => {
    if (!fs.existsSync(CLI)) throw new Error(`needs the built CLI (${CLI}): npm run build`);
    const cat = fs.realpathSync('/usr/bin/cat');
    const ls = fs.realpathSync('/usr/bin/ls');
    const catFiles = lddFiles(cat).map((f) => fs.realpathSync(f));
    const lsOnly = lddFiles(ls)
      .map((f) => fs.realpathSync(f))
      .filter((f) => !catFiles.includes(f));
    expect(lsOnly.length).toBeGreaterThan(0); // ls needs a library cat does not (libselinux here)
    const allow = [cat, ls, '/etc/ld.so.cache', ...catFiles].map((e) => `    - ${e}`).join('\n');
    const yaml = (deny: string[]) =>
      `user: root\nfilesystem:\n  mode: whitelist\n  allow:\n${allow}\n  deny: [${deny.join(', ')}]\n` +
      `commands:\n  mode: whitelist\n  allow: [${cat}, ${ls}]\n`;

    const r = validate(yaml([]));
    const start = r.findings.filter((f) => f.code === 'command_cannot_start');
    expect(start).toEqual([expect.objectContaining({ entry: ls, rule: null })]);
    expect(lsOnly).toContain(start[0]!.file);

    // A deny entry is named as the rule that refuses the start.
    const lib = catFiles.find((f) => /libc\.so/.test(f))!;
    const denied = validate(yaml([lib])).findings.filter((f) => f.code === 'command_cannot_start');
    expect(denied).toContainEqual(expect.objectContaining({ entry: cat, file: lib, rule: lib }));
  });
});
