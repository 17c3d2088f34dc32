/**
 * explain_command: the verdict without the execution. This module imports the parser, the binary
 * resolver and the policy judge, and nothing else of the terminal: the executor is not in its
 * import graph, so no code path from here can start a process (tests/unit/tools/terminal/explain.test.ts
 * walks the graph and checks it at run time).
 */
import { parseCommandLine } from './parse.js';
import { judge } from './verdict.js';
import { pathDirs, resolveBinary } from './resolve.js';
import { result, type CommandResult, type DeciderFactory, type PolicySource } from './types.js';

export interface ExplainDeps {
  policy: PolicySource;
  decider: DeciderFactory;
  /** The jail root (already a real path); a relative binary is resolved from it. */
  jail: string;
  searchPath: string;
}

/** Returns the verdict run_command would reach, with empty output and exit_code null. */
export async function explainCommand(command: string, deps: ExplainDeps): Promise<CommandResult> {
  const parsed = parseCommandLine(command);
  if (!parsed.ok) return result('PARSE_ERROR', parsed.reason);
  const policy = await deps.policy();
  const resolved = resolveBinary(parsed.argv[0]!, { searchPath: deps.searchPath, cwd: deps.jail });
  const j = judge(parsed.argv, resolved, policy, deps.decider(policy), pathDirs(deps.searchPath));
  return result(j.allowed ? 'OK' : 'POLICY_DENIED', j.policyReason);
}
