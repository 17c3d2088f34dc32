/**
 * `leash tools policy init|check|explain|test`: policies over operations you can generate, check,
 * explain and regression-test (docs/tools.md "Policies you can test").
 *   init [--recipe NAME] [--policy FILE]   writes a conservative policy (never overwrites)
 *   check [--policy FILE]                  schema, variables, duplicate ids, impossible combinations
 *   explain --action FILE [--policy FILE]  the normalised action, every matching rule, the decision
 *   test --cases FILE [--policy FILE]      declarative cases; exit 1 on any mismatch
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { stringify } from 'yaml';
import { LeashError } from '../errors.js';
import { parseStrictYaml, readPolicyFile, strictProblems } from '../formats/yaml.js';
import { writeAtomic } from '../tools/learn/learn.js';
import { actionSchema, caseFileSchema, explain, RECIPES, runCases } from '../tools/judge/recipes.js';
import { loadGatePolicy } from '../tools/judge/policy-file.js';
import { print, printJson } from './context.js';

const DEFAULT_POLICY = 'leash-tools.yaml';

/** The conservative policy `init` writes without a recipe. */
const BASE = {
  tools: {
    default: 'ask',
    rules: [
      { id: 'no-secrets-files', effect: 'deny', operations: ['fs.*'], resources: ['**/.env', '**/.env.*', '**/.ssh'] },
      { id: 'workspace-read', effect: 'allow', operations: ['fs.read', 'git.read'], resources: ['${workspace}/**'] },
    ],
  },
};

function readDoc(file: string, what: string): unknown {
  try {
    return parseStrictYaml(readPolicyFile(file), file, { uniqueKeys: true }).js;
  } catch (e) {
    if (e instanceof LeashError)
      throw new LeashError('usage', `cannot read ${what} ${file}`, {
        issues: strictProblems(e, file).map((m) => ({ path: file, message: m })),
      });
    throw e;
  }
}

function parsed<T>(
  schema: {
    safeParse(
      v: unknown,
    ): { success: true; data: T } | { success: false; error: { issues: { path: PropertyKey[]; message: string }[] } };
  },
  doc: unknown,
  file: string,
  what: string,
): T {
  const r = schema.safeParse(doc);
  if (r.success) return r.data;
  throw new LeashError('usage', `${what} ${file} is not valid`, {
    issues: r.error.issues.map((i) => ({ path: i.path.map(String).join('.') || '(top)', message: i.message })),
  });
}

export function register(program: Command): void {
  const tools = program.commands.find((c) => c.name() === 'tools');
  if (tools === undefined) throw new Error('the tools surface command is registered first');
  const policy = tools.command('policy').description('policies over operations: init, check, explain, test');

  policy
    .command('init')
    .description('write a conservative tools policy (a recipe, or the base one); never overwrites a file')
    .option('--recipe <name>', `one of: ${[...RECIPES.keys()].join(', ')}`)
    .option('--policy <file>', 'where to write it', DEFAULT_POLICY)
    .option('--list-recipes', 'list the recipes and exit')
    .action((o: { recipe?: string; policy: string; listRecipes?: boolean }) => {
      if (o.listRecipes) {
        for (const r of RECIPES.values()) print(`${r.recipe.padEnd(11)} ${r.for}`);
        return;
      }
      let doc: unknown = BASE;
      if (o.recipe !== undefined) {
        const r = RECIPES.get(o.recipe);
        if (r === undefined)
          throw new LeashError(
            'usage',
            `no recipe ${JSON.stringify(o.recipe)} (one of: ${[...RECIPES.keys()].join(', ')})`,
          );
        doc = r.policy;
      }
      const file = path.resolve(o.policy);
      if (fs.existsSync(file))
        throw new LeashError('usage', `${o.policy} exists: leash tools policy init never overwrites a file`, { file });
      const head = `# leash tools policy${o.recipe ? ` (recipe ${o.recipe})` : ''}: see docs/tools.md. Check it with\n# leash tools policy check --policy ${o.policy}\n`;
      writeAtomic(file, head + stringify(doc));
      print(`wrote ${o.policy}`);
    });

  policy
    .command('check')
    .description('check a tools policy: schema, variables, duplicate rule ids, impossible combinations')
    .option('--policy <file>', 'the policy file', DEFAULT_POLICY)
    .option('--workspace <dir>', 'the workspace ${workspace} names (default: tools.workspace, else .)')
    .option('--json', 'JSON output')
    .action((o: { policy: string; workspace?: string; json?: boolean }) => {
      const { policy: p } = loadGatePolicy(o.policy, o.workspace ? { workspace: path.resolve(o.workspace) } : {});
      const rules = p.ops?.rules.rules.length ?? 0;
      if (o.json) printJson({ ok: true, policy: o.policy, rules, workspace: p.ops?.workspace ?? null });
      else print(`${o.policy}: ok (${rules} rules over operations${p.ops ? `, workspace ${p.ops.workspace}` : ''})`);
    });

  policy
    .command('explain')
    .description('the normalised action of one call, every rule it matches, and the final decision')
    .requiredOption('--action <file>', 'YAML/JSON: {tool, arguments?, server?}')
    .option('--policy <file>', 'the policy file', DEFAULT_POLICY)
    .option('--workspace <dir>', 'the workspace (default: tools.workspace, else .)')
    .option('--json', 'JSON output')
    .action((o: { action: string; policy: string; workspace?: string; json?: boolean }) => {
      const a = parsed(actionSchema, readDoc(o.action, 'the action file'), o.action, 'the action file');
      const { policy: p } = loadGatePolicy(o.policy, o.workspace ? { workspace: path.resolve(o.workspace) } : {});
      const e = explain(p, a);
      if (o.json) return printJson(e);
      print(`action    ${JSON.stringify(e.action)}`);
      print(`matched   ${e.matched.length ? e.matched.join(', ') : '(none)'}`);
      print(`decision  ${e.decision} (${e.reason}${e.rule ? `, rule ${e.rule}` : ''})`);
    });

  policy
    .command('test')
    .description('run declarative cases against a policy; exit 1 on any mismatch')
    .requiredOption(
      '--cases <file>',
      'YAML/JSON: {workspace?, server?, cases: [{name, tool, arguments?, expect, rule?}]}',
    )
    .option('--policy <file>', 'the policy file', DEFAULT_POLICY)
    .option('--json', 'JSON output')
    .action((o: { cases: string; policy: string; json?: boolean }) => {
      const cf = parsed(caseFileSchema, readDoc(o.cases, 'the case file'), o.cases, 'the case file');
      const { policy: p } = loadGatePolicy(o.policy, cf.workspace ? { workspace: cf.workspace } : {});
      const results = runCases(p, cf);
      const failed = results.filter((r) => !r.ok);
      if (o.json) printJson({ passed: results.length - failed.length, failed: failed.length, results });
      else {
        for (const r of results)
          print(
            `${r.ok ? 'ok  ' : 'FAIL'} ${r.name}: ${r.got.decision}${r.got.rule ? ` (${r.got.rule})` : ''}${r.ok ? '' : `, expected ${r.expect}${r.rule ? ` (${r.rule})` : ''}`}`,
          );
        print(`${results.length - failed.length} passed, ${failed.length} failed`);
      }
      if (failed.length) process.exitCode = 1;
    });
}
