/**
 * The engine as the config, CLI and log code use it. PLACEHOLDER until branch `engine` merges:
 * then this file only adapts src/engine/index.ts (entry grammar, inertEntries, compilePolicy,
 * decide, maskSecrets) and holds no logic of its own.
 */
import type { PolicyInput, Surface, SubjectOf, Verdict } from './engine/types.js';

export interface InertEntry {
  surface: Surface;
  list: 'allow' | 'deny';
  entry: string;
  problem: string;
}

/** The problem with one entry of a surface (null = the entry can match something). */
export function entryProblem(surface: Surface, entry: string): string | null {
  if (entry.trim() !== entry || /\s/.test(entry)) return 'contains whitespace';
  if (entry === '') return 'is empty';
  if (surface === 'filesystem' && !entry.startsWith('/')) return 'is not an absolute path';
  if (surface === 'network' && /^[a-z]+:\/\//i.test(entry)) return 'is a URL, not a host';
  return null;
}

/** Every inert entry of a (partial) policy: allow and deny lists of the four surfaces. */
export function inertEntries(fragment: Partial<Record<Surface, { allow?: string[]; deny?: string[] }>>): InertEntry[] {
  const out: InertEntry[] = [];
  for (const surface of ['network', 'filesystem', 'commands', 'tools'] as const) {
    const s = fragment[surface];
    if (!s) continue;
    for (const list of ['allow', 'deny'] as const) {
      for (const entry of s[list] ?? []) {
        const problem = entryProblem(surface, entry);
        if (problem) out.push({ surface, list, entry, problem });
      }
    }
  }
  return out;
}

export interface CompiledPolicy {
  input: PolicyInput;
}

export function compilePolicy(input: PolicyInput): CompiledPolicy {
  return { input };
}

export function decide<S extends Surface>(
  _surface: S,
  _subject: SubjectOf[S],
  _policy: CompiledPolicy | null,
): Verdict {
  throw new Error('engine not merged yet');
}

/** Masks secrets and PII in a tool's inputs before they are logged. */
export function maskSecrets(value: unknown): unknown {
  return value;
}
