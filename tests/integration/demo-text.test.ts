import { describe, expect, it } from 'vitest';
import { DEMO_STEPS, runDemo } from '../../src/cli/demo/demo.js';
import { canRunLab } from '../lab/index.js';

// `leash demo` as a reader sees it (issue 41): every action's title whole, and no raw JSON after the table.
describe.skipIf(!canRunLab)('leash demo (text)', () => {
  it('prints each row whole and no decision-log JSON', async () => {
    let text = '';
    const code = await runDemo({ id: 'l41dm', account: 'leash-t41demo', out: (s) => (text += s) });
    expect(code, text).toBe(0);
    for (const s of DEMO_STEPS) expect(text).toContain(s.title);
    expect(text.split('\n').filter((l) => l.trim().startsWith('{'))).toEqual([]);
    expect(text).toMatch(/^\d+ decision lines were written/m);
    expect(text).toMatch(/Lab torn down/);
  }, 180_000);
});
