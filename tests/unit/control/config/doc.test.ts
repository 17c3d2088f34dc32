import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { configReferenceTable } from '../../../../src/control/config/reference.js';

/** Table rows as trimmed cells (prettier re-pads tables, so compare cells, not bytes). */
function rows(md: string): string[][] {
  return md
    .split('\n')
    .filter((l) => l.startsWith('|') && !/^\|[\s|:-]+\|$/.test(l))
    .map((l) =>
      l
        .slice(1, -1)
        .split(/(?<!\\)\|/)
        .map((c) => c.trim()),
    );
}

describe('docs/config.md', () => {
  it('field table matches the schema (regenerate with configReferenceTable())', () => {
    const doc = fs.readFileSync(path.resolve(import.meta.dirname, '../../../../docs/config.md'), 'utf8');
    const section = doc.slice(doc.indexOf('## Fields'), doc.indexOf('## Fragments'));
    expect(rows(section)).toEqual(rows(configReferenceTable()));
    expect(rows(section).length).toBeGreaterThan(30);
  });
});
