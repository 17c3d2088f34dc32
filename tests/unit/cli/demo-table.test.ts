import { describe, expect, it } from 'vitest';
import { DEMO_STEPS, renderTable, type Row } from '../../../src/cli/demo/demo.js';

const rows: Row[] = DEMO_STEPS.map((step) => ({
  step,
  outcome: { result: step.expect, detail: `detail of ${step.title}` },
  decisions: [],
}));

describe('leash demo table', () => {
  const text = renderTable(rows, 'leash-demo');
  const lines = text.split('\n').filter(Boolean);

  it('shows every action title whole (none cut with an ellipsis)', () => {
    expect(text).not.toContain('…');
    for (const s of DEMO_STEPS) expect(text).toContain(s.title);
    expect(DEMO_STEPS.some((s) => s.title.length > 56)).toBe(true);
  });

  it('keeps the expected column aligned with its header on every row', () => {
    const col = lines[0]!.indexOf('expected');
    rows.forEach((r, i) => {
      const line = lines[1 + 2 * i]!;
      expect(line.slice(col, col + r.step.expect.length)).toBe(r.step.expect);
    });
  });

  it('is the table only: two lines a row and a header, no decision log', () => {
    expect(lines).toHaveLength(1 + 2 * rows.length);
    expect(lines.some((l) => l.trim().startsWith('{'))).toBe(false);
  });
});
