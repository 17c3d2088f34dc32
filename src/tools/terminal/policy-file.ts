/**
 * The terminal's policy: the parts of a Leash config or profile `leash terminal` reads (`fail_mode`,
 * `enforce` and the `commands` section, with `commands.args`), as a zod schema of the config's
 * family (./fields.ts is the config's `commands.args`), read with the config's strict YAML reader.
 */
import { z } from 'zod';
import { parseStrictYaml, readPolicyFile, strictProblems } from '../../formats/yaml.js';
import { formatPath } from '../../formats/problems.js';
import { LeashError } from '../../errors.js';
import { commandEntryProblem } from '../../engine/index.js';
import { commandArgsSchema, LIST_MSG } from './fields.js';
import type { TerminalPolicy } from './types.js';

/** A policy that failed validation (config_invalid) or cannot be read (config_missing); `problems` are `path: message` lines. */
export class TerminalPolicyError extends LeashError {
  constructor(
    readonly problems: string[],
    readonly kind: 'missing' | 'invalid',
  ) {
    super(kind === 'missing' ? 'config_missing' : 'config_invalid', problems.join('\n'));
  }
}

/**
 * A command entry of the engine's grammar. One that can never match is refused here rather than
 * reported: the terminal's own policy file has no other reader to warn, and an inert deny blocks
 * nothing.
 */
const entry = z.string({ error: 'must be a string' }).superRefine((e, ctx) => {
  const p = commandEntryProblem(e);
  if (p) ctx.addIssue({ code: 'custom', message: `${p.message} ('${e}')` });
});
const entries = z.array(entry, { error: LIST_MSG });

/**
 * Other sections of a config are left to their own loaders; unknown keys under `commands` are
 * refused: a misspelt `deny` would otherwise deny nothing.
 */
export const terminalPolicySchema = z.object(
  {
    fail_mode: z.enum(['closed', 'open'], { error: 'must be closed or open' }).default('closed'),
    enforce: z.enum(['enforce', 'shadow'], { error: 'must be enforce or shadow' }).default('enforce'),
    commands: z.strictObject(
      {
        mode: z.enum(['whitelist', 'blacklist'], { error: 'must be whitelist or blacklist' }).default('whitelist'),
        allow: entries.default([]),
        deny: entries.default([]),
        ask: entries.optional(),
        args: commandArgsSchema.default({}),
      },
      { error: 'required, a mapping with mode, allow, deny and optional args' },
    ),
  },
  { error: 'must be a mapping' },
);

/** Validates the parts of a Leash config or profile the terminal reads. */
export function validateTerminalPolicy(doc: unknown): TerminalPolicy {
  const r = terminalPolicySchema.safeParse(doc);
  if (!r.success) {
    const problems = r.error.issues.flatMap((i) =>
      i.code === 'unrecognized_keys'
        ? i.keys.map((k) => `${formatPath([...i.path, k])}: unknown key`)
        : [`${formatPath(i.path)}: ${i.message}`],
    );
    throw new TerminalPolicyError(problems, 'invalid');
  }
  const { fail_mode, enforce, commands: c } = r.data;
  return {
    fail_mode,
    ...(enforce === 'shadow' ? { enforce } : {}),
    commands: { mode: c.mode, allow: c.allow, deny: c.deny, ...(c.ask ? { ask: c.ask } : {}), args: c.args },
  };
}

/** Reads and validates a policy file. A missing file and an invalid file are different errors. */
export function loadTerminalPolicy(file: string): TerminalPolicy {
  // The strict reader (src/formats/yaml.ts): no anchors, aliases, merge keys or tags, UTF-8,
  // bounded sizes, a duplicate key refused.
  let doc: unknown;
  try {
    doc = parseStrictYaml(readPolicyFile(file), file, { uniqueKeys: true }).js;
  } catch (e) {
    if (!(e instanceof LeashError)) throw e;
    const kind = e.code === 'config_missing' || e.code === 'config_unreadable' ? 'missing' : 'invalid';
    throw new TerminalPolicyError(strictProblems(e, file), kind);
  }
  return validateTerminalPolicy(doc);
}
