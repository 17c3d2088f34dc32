import { describe, expect, it } from 'vitest';
import { validateGatePolicy } from '../../../src/tools/judge/policy-file.js';
import { compileGatePolicy } from '../../../src/tools/judge/compile.js';
import { RECIPES, recipeTable, runCases } from '../../../src/tools/judge/recipes.js';
import { GATE_ENGINE } from '../../../src/tools/judge/compile.js';

describe('recipes', () => {
  it('ship filesystem, git, fetch, terminal, github, sqlite and postgres, each for a built-in table', () => {
    expect([...RECIPES.keys()].sort()).toEqual([
      'fetch',
      'filesystem',
      'git',
      'github',
      'postgres',
      'sqlite',
      'terminal',
    ]);
    for (const r of RECIPES.values()) expect(recipeTable(r), r.recipe).not.toBeNull();
  });

  it.each([...RECIPES.keys()])('%s passes its own cases', (name) => {
    const r = RECIPES.get(name)!;
    const loaded = validateGatePolicy(r.policy);
    const policy = compileGatePolicy(loaded.tools, loaded.failMode, GATE_ENGINE, { workspace: r.cases.workspace });
    const results = runCases(policy, r.cases);
    expect(results.filter((x) => !x.ok).map((x) => ({ name: x.name, got: x.got }))).toEqual([]);
    // Every effect is exercised by some recipe case, and a case can fail: flip one and it does.
    const flipped = runCases(policy, {
      ...r.cases,
      cases: [{ ...r.cases.cases[0]!, expect: r.cases.cases[0]!.expect === 'deny' ? 'allow' : 'deny' }],
    });
    expect(flipped[0]!.ok).toBe(false);
  });
});
