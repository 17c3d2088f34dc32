import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { engineDeciderFactory } from '../../../../src/tools/terminal/decider.js';
import type { TerminalPolicy } from '../../../../src/tools/terminal/types.js';

const localDeciderFactory = engineDeciderFactory();

const loaded = vi.hoisted(() => ({ executor: false, spawns: 0 }));

// Runtime half of the proof: if anything on explain's path imported the executor, this factory
// would run; if anything started a process, the spawn counter would move.
vi.mock('../../../../src/tools/terminal/executor.js', () => {
  loaded.executor = true;
  return {};
});
vi.mock('node:child_process', async (orig) => {
  const real = (await orig()) as Record<string, unknown>;
  const count =
    (name: string) =>
    (...args: unknown[]) => {
      loaded.spawns++;
      return (real[name] as (...a: unknown[]) => unknown)(...args);
    };
  return { ...real, spawn: count('spawn'), execFile: count('execFile'), exec: count('exec'), fork: count('fork') };
});

const srcDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../src/tools/terminal');

/** Every module reachable from `entry` through static and dynamic imports (relative ones resolved). */
function importGraph(entry: string): { files: Set<string>; externals: Set<string> } {
  const files = new Set<string>();
  const externals = new Set<string>();
  const todo = [entry];
  while (todo.length > 0) {
    const f = todo.pop()!;
    if (files.has(f)) continue;
    files.add(f);
    const src = fs.readFileSync(f, 'utf8');
    const re =
      /(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\s*\(\s*['"]([^'"]+)['"]\s*\)|import\s+['"]([^'"]+)['"]/g;
    for (const m of src.matchAll(re)) {
      const spec = (m[1] ?? m[2] ?? m[3])!;
      if (spec.startsWith('.')) todo.push(path.resolve(path.dirname(f), spec).replace(/\.js$/, '.ts'));
      else externals.add(spec);
    }
  }
  return { files, externals };
}

describe('explain_command cannot reach the executor', () => {
  it('has no import path from explain.ts to executor.ts or to child_process', () => {
    const g = importGraph(path.join(srcDir, 'explain.ts'));
    const names = [...g.files].map((f) => path.basename(f));
    expect(names).toContain('parse.ts');
    expect(names).toContain('verdict.ts');
    expect(names).not.toContain('executor.ts');
    expect(names).not.toContain('run.ts');
    expect([...g.externals].filter((e) => /child_process|worker_threads|cluster/.test(e))).toEqual([]);
  });

  it('the walk does find the executor from run.ts (the check is not vacuous)', () => {
    const g = importGraph(path.join(srcDir, 'run.ts'));
    expect([...g.files].map((f) => path.basename(f))).toContain('executor.ts');
    expect(importGraph(path.join(srcDir, 'executor.ts')).externals).toContain('node:child_process');
  });

  const jail = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-term-explain-'));
  afterAll(() => fs.rmSync(jail, { recursive: true, force: true }));

  it('at run time, explaining an allowed command loads no executor and starts nothing', async () => {
    const { explainCommand } = await import('../../../../src/tools/terminal/explain.js');
    const policy: TerminalPolicy = {
      fail_mode: 'closed',
      commands: { mode: 'whitelist', allow: ['touch'], deny: [], args: {} },
    };
    const marker = path.join(jail, 'marker');
    const res = await explainCommand(`touch ${marker}`, {
      policy: async () => policy,
      decider: localDeciderFactory,
      jail,
      searchPath: '/usr/bin:/bin',
    });
    expect(res).toMatchObject({ ok: true, code: 'OK', stdout: '', stderr: '', exit_code: null });
    expect(fs.existsSync(marker)).toBe(false);
    expect(loaded.executor).toBe(false);
    expect(loaded.spawns).toBe(0);
  });
});
