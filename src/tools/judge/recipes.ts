/**
 * Policies you can test: the recipes (./recipes/*.json, each a policy and its own cases), `explain`
 * of one action (the normalised action, every matching rule, the final decision) and `test` of a
 * case file (declarative cases; a mismatch is a failure). The judgment is the gate's own
 * (judgeRequest), so what a case says is what `leash mcp` does.
 */
import { z } from 'zod';
import { fromPlain } from '../../formats/json.js';
import filesystem from './recipes/filesystem.json' with { type: 'json' };
import git from './recipes/git.json' with { type: 'json' };
import fetchRecipe from './recipes/fetch.json' with { type: 'json' };
import terminal from './recipes/terminal.json' with { type: 'json' };
import github from './recipes/github.json' with { type: 'json' };
import sqlite from './recipes/sqlite.json' with { type: 'json' };
import postgres from './recipes/postgres.json' with { type: 'json' };
import { MAPPINGS } from './operations/mappings.js';
import { judgeRequest } from './decide.js';
import { type CompiledGatePolicy } from './compile.js';
import { ServerModel } from './operations/model.js';

export const actionSchema = z.strictObject({
  /** serverInfo.name of the server the call goes to (selects the table under mapping: auto). */
  server: z.string().min(1).optional(),
  tool: z.string().min(1),
  arguments: z.record(z.string(), z.unknown()).optional(),
});
export type ActionSpec = z.output<typeof actionSchema>;

export const caseFileSchema = z.strictObject({
  workspace: z.string().min(1).optional(),
  server: z.string().min(1).optional(),
  cases: z
    .array(
      z.strictObject({
        name: z.string().min(1),
        server: z.string().min(1).optional(),
        tool: z.string().min(1),
        arguments: z.record(z.string(), z.unknown()).optional(),
        expect: z.enum(['allow', 'deny', 'ask']),
        rule: z.string().min(1).optional(),
      }),
    )
    .min(1),
});
export type CaseFile = z.output<typeof caseFileSchema>;

const recipeSchema = z.strictObject({
  recipe: z.string(),
  for: z.string(),
  policy: z.strictObject({ tools: z.record(z.string(), z.unknown()) }),
  cases: caseFileSchema,
});
export type Recipe = z.output<typeof recipeSchema>;

export const RECIPES: ReadonlyMap<string, Recipe> = new Map(
  [filesystem, git, fetchRecipe, terminal, github, sqlite, postgres].map((r) => {
    const x = recipeSchema.parse(r);
    return [x.recipe, x];
  }),
);

/** What explain reports for one action. */
export interface Explanation {
  tool: string;
  server: string | null;
  action: unknown;
  matched: string[];
  decision: 'allow' | 'deny' | 'ask';
  reason: string;
  rule: string | null;
}

export function explain(policy: CompiledGatePolicy, a: ActionSpec): Explanation {
  const params = fromPlain({ name: a.tool, arguments: a.arguments ?? {} });
  // No server runs here: a relative path is read as a server rooted at the workspace would read it.
  const model = policy.ops === null ? null : ServerModel.rootedAt(policy.ops.workspace);
  const j = judgeRequest('tools/call', params, policy, { serverName: a.server ?? null, model });
  const decision = j.action;
  return {
    tool: a.tool,
    server: a.server ?? null,
    action: j.op?.action ?? null,
    matched: j.op?.decision.matched ?? [],
    decision,
    reason:
      j.action === 'allow'
        ? (j.verdict?.reason ?? 'allow_entry')
        : j.action === 'ask'
          ? (j.op?.decision.reason ?? j.reason)
          : j.reason,
    rule: j.action === 'allow' ? (j.verdict?.rule ?? null) : j.rule,
  };
}

export interface CaseResult {
  name: string;
  ok: boolean;
  expect: string;
  rule?: string;
  got: Explanation;
}

export function runCases(policy: CompiledGatePolicy, file: CaseFile): CaseResult[] {
  return file.cases.map((c) => {
    const got = explain(policy, { server: c.server ?? file.server, tool: c.tool, arguments: c.arguments });
    const ok = got.decision === c.expect && (c.rule === undefined || got.rule === c.rule);
    return { name: c.name, ok, expect: c.expect, rule: c.rule, got };
  });
}

/** The table a recipe is for exists (a recipe naming no table reads every call as unknown). */
export function recipeTable(r: Recipe): string | null {
  const m = r.policy.tools.mapping;
  return typeof m === 'string' && MAPPINGS.has(m) ? m : null;
}
