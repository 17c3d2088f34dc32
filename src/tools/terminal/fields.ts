/**
 * The terminal's fields of the config's `commands` section, as data: `commands.args`, the argument
 * rules `leash terminal` applies (docs/terminal.md), as a zod schema. The config schema
 * (src/control/config/schema.ts) and the terminal's own policy file (./policy-file.ts) are built
 * from this one definition, as the gate's fields are (../judge/fields.ts).
 */
import { z } from 'zod';
import { commandEntryProblem } from '../../engine/index.js';

export const LIST_MSG = 'must be a list of strings';

/** One command entry's argument rules: patterns that deny when all their tokens appear in argv. */
export const argRuleSchema = z
  .strictObject(
    {
      deny_args: z
        .array(z.string({ error: 'must be a string' }).trim().min(1, 'must not be empty'), { error: LIST_MSG })
        .min(1, 'must name at least one pattern')
        .describe('argument patterns: one denies when all its tokens appear in the argv, in any order'),
      reason: z
        .string({ error: 'must be a string' })
        .optional()
        .describe("the operator's words, appended to the terminal's policy_reason"),
    },
    { error: 'must be a mapping with deny_args' },
  )
  .describe("one command entry's argument rules");

/**
 * `commands.args`, keyed by a command entry of the same grammar as allow/deny; a key that can never
 * match is refused, since its deny_args would deny nothing.
 */
export const commandArgsSchema = z
  .record(z.string(), argRuleSchema, { error: 'must be a mapping of command entry to { deny_args, reason }' })
  .superRefine((rec, ctx) => {
    for (const key of Object.keys(rec)) {
      const p = commandEntryProblem(key);
      if (p) ctx.addIssue({ code: 'custom', path: [key], message: `${p.message} (an args key is a command entry)` });
    }
  })
  .describe(
    'leash terminal: per-command argument rules, keyed by a command entry (basename or absolute path); a matching argv is refused before it runs',
  );

/** `leash terminal`'s argument rule for one command entry (docs/terminal.md). */
export type ArgRule = z.output<typeof argRuleSchema>;
