/**
 * The man page and the shell completion are generated, not written: leash(1) from docs/cli.md
 * (scripts/cli-man.mjs), the completion scripts from the commander program (`leash completion`). These tests
 * check that neither can drift from the program: every command the program has is in docs/cli.md and in the
 * man page, and completion offers every subcommand at every level.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Command } from 'commander';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import { completionTree } from '../../src/cli/completion.js';
import { ensureBuilt } from './helpers.js';

const root = path.resolve(__dirname, '../..');
const CLI = path.join(root, 'dist/src/cli/main.js');
const isRoot = process.getuid?.() === 0;
const has = (bin: string) => spawnSync(bin, ['--version']).status === 0;
const SURFACES = ['network', 'filesystem', 'commands', 'tools'];

function run(argv: string[], input?: string) {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', input });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** Every command named in a `## \`leash …\`` heading of docs/cli.md (`<surface>` stands for the four surfaces). */
function docCommands(): Set<string> {
  const names = new Set<string>();
  for (const h of fs.readFileSync(path.join(root, 'docs/cli.md'), 'utf8').match(/^## .*$/gm) ?? []) {
    for (const m of h.matchAll(/`leash ([a-z<][a-z<>-]*)/g)) {
      if (m[1] === '<surface>') SURFACES.forEach((s) => names.add(s));
      else names.add(m[1]!);
    }
  }
  return names;
}

const program: Command = buildProgram();
const topLevel = program.commands.map((c) => c.name());

describe('man page (leash(1) from docs/cli.md)', () => {
  let page = '';
  beforeAll(() => {
    const r = run([process.execPath, path.join(root, 'scripts/cli-man.mjs'), path.join(root, 'docs/cli.md'), '0.0.0']);
    expect(r.code, r.err).toBe(0);
    page = r.out;
  });

  it('docs/cli.md has a section for every command of the program', () => {
    const documented = docCommands();
    for (const name of topLevel) expect(documented.has(name), `docs/cli.md has no ## \`leash ${name}\``).toBe(true);
  });

  it('the page has a subsection for every command docs/cli.md documents, and renders without a warning', () => {
    const sections = page.match(/^\.SS .*$/gm) ?? [];
    for (const name of docCommands()) {
      const shown = SURFACES.includes(name) ? '<surface>' : name;
      expect(
        sections.some((s) => s.includes(`leash ${shown.replace(/-/g, '\\-')}`)),
        `leash(1) has no .SS for leash ${shown}`,
      ).toBe(true);
    }
    expect(page).toMatch(/^\.TH LEASH 1 /m);
    expect(page).toMatch(/^\.SH EXIT CODES$/m);
    // The check lintian makes: man with warnings on, nothing on stderr.
    expect(isRoot || has('man'), 'man is not installed (package man-db)').toBe(true);
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'leash-man-')), 'leash.1');
    fs.writeFileSync(file, page);
    const r = spawnSync('man', ['--warnings', '-E', 'UTF-8', '-l', '-Tutf8', '-Z', file], {
      encoding: 'utf8',
      env: { ...process.env, LC_ALL: 'C.UTF-8', MANWIDTH: '80' },
    });
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toBe('');
  });
});

describe('shell completion (from the commander program)', () => {
  beforeAll(() => ensureBuilt());
  const tree = completionTree(program);
  // Every command path that has subcommands, and what they are (names and aliases).
  const levels = tree.filter((n) => n.subcommands.length > 0);

  it('the tree holds every top-level command and alias, and nested ones (net remove, profile save)', () => {
    const top = tree.find((n) => n.path === '')!;
    for (const c of program.commands) for (const n of [c.name(), ...c.aliases()]) expect(top.subcommands).toContain(n);
    expect(tree.find((n) => n.path === 'net')?.subcommands).toEqual(expect.arrayContaining(['allow', 'remove']));
    expect(tree.find((n) => n.path === 'profile')?.subcommands).toEqual(expect.arrayContaining(['save', 'list']));
    expect(tree.find((n) => n.path === 'check')?.options).toContain('--json');
  });

  it('bash: completing after each command path offers exactly its subcommands and options', () => {
    expect(isRoot || has('bash'), 'bash is not installed').toBe(true);
    const script = run([process.execPath, CLI, 'completion', 'bash']);
    expect(script.code, script.err).toBe(0);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-compl-'));
    try {
      fs.writeFileSync(path.join(dir, 'leash.bash'), script.out);
      for (const n of [...levels, tree.find((x) => x.path === 'check')!]) {
        // As bash calls it: the words so far (an option with its value in front, to show it is skipped) and an
        // empty word being completed.
        const words = ['leash', '-c', '/etc/leash/leash.yaml', ...(n.path ? n.path.split(' ') : []), ''];
        const r = run([
          'bash',
          '-c',
          `source "$1"; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _leash; printf '%s\\n' "\${COMPREPLY[@]}"`,
          'bash',
          path.join(dir, 'leash.bash'),
        ]);
        expect(r.code, r.err).toBe(0);
        expect(r.out.split('\n').filter(Boolean).sort(), `leash ${n.path}`).toEqual(
          [...n.subcommands, ...n.options].sort(),
        );
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('zsh: the same words, through compadd', () => {
    expect(isRoot || has('zsh'), 'zsh is not installed (scripts/install-deps.sh installs it)').toBe(true);
    const script = run([process.execPath, CLI, 'completion', 'zsh']);
    expect(script.code, script.err).toBe(0);
    expect(script.out.startsWith('#compdef leash\n')).toBe(true);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-compl-'));
    try {
      const file = path.join(dir, '_leash');
      fs.writeFileSync(file, script.out);
      expect(run(['zsh', '-n', file]).code).toBe(0);
      for (const n of levels) {
        const words = ['leash', ...(n.path ? n.path.split(' ') : []), ''];
        // compadd stubbed to print what it is given; `words` and CURRENT as the completion system sets them.
        const r = run([
          'zsh',
          '-f',
          '-c',
          `compadd() { [[ "$1" == -- ]] && shift; print -l -- "$@"; }; words=(${words.map((w) => `'${w}'`).join(' ')}); CURRENT=${words.length}; source "$1"`,
          'zsh',
          file,
        ]);
        expect(r.code, r.err).toBe(0);
        expect(r.out.split('\n').filter(Boolean).sort(), `leash ${n.path}`).toEqual(
          [...n.subcommands, ...n.options].sort(),
        );
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('another shell is a usage error (exit 2)', () => {
    const r = run([process.execPath, CLI, 'completion', 'fish']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/\[usage\]/);
  });
});
