import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ENTRY_PROBLEMS, ERROR_CODES, EXIT, FINDING_CODES, LeashError, REASONS, allCodes } from '../../src/errors.js';

const root = path.resolve(import.meta.dirname, '..', '..');
const doc = fs.readFileSync(path.join(root, 'docs', 'errors.md'), 'utf8');
const documented = new Set([...doc.matchAll(/^### `([a-z0-9_]+)`$/gm)].map((m) => m[1]!));

/** The members of `export type <name> = | 'a' | 'b'` in the engine contract, read from source. */
function unionInContract(name: string): string[] {
  const src = fs.readFileSync(path.join(root, 'src', 'engine', 'types.ts'), 'utf8');
  const m = new RegExp(`export type ${name} =([^;]+);`).exec(src);
  return [...(m?.[1] ?? '').matchAll(/'([a-z_]+)'/g)].map((x) => x[1]!);
}

describe('error catalogue', () => {
  it.each(allCodes())('documents %s in docs/errors.md', (code) => {
    expect(documented.has(code)).toBe(true);
  });

  it('documents every Reason of the engine contract', () => {
    const reasons = unionInContract('Reason');
    expect(reasons.length).toBeGreaterThan(5);
    for (const r of reasons) expect(documented, r).toContain(r);
    expect(Object.keys(REASONS).sort()).toEqual([...reasons].sort());
  });

  it('documents every entry problem code of the engine contract', () => {
    const codes = unionInContract('EntryProblemCode');
    expect(codes.length).toBeGreaterThan(5);
    for (const c of codes) expect(documented, c).toContain(c);
    expect(Object.keys(ENTRY_PROBLEMS).sort()).toEqual([...codes].sort());
  });

  it('documents nothing that is not in the catalogue', () => {
    const known = new Set(allCodes());
    expect([...documented].filter((c) => !known.has(c))).toEqual([]);
  });

  it('codes are stable snake_case', () => {
    for (const c of allCodes()) expect(c).toMatch(/^[a-z][a-z0-9_]*$/);
  });

  it('every error carries the exit code of its catalogue entry', () => {
    for (const code of Object.keys(ERROR_CODES) as (keyof typeof ERROR_CODES)[]) {
      const e = new LeashError(code, 'x');
      expect(e.exitCode).toBe(ERROR_CODES[code]);
      expect(Object.values(EXIT)).toContain(e.exitCode);
      expect(e.toJSON().error.code).toBe(code);
    }
    expect(new LeashError('config_missing', 'x').exitCode).toBe(2);
    expect(new LeashError('config_write_failed', 'x').exitCode).toBe(3);
  });

  it('finding severities are warning or critical', () => {
    for (const s of Object.values(FINDING_CODES)) expect(['warning', 'critical']).toContain(s);
  });
});
