import { describe, expect, it } from 'vitest';
import { runDemo } from '../../src/cli/demo.js';
import { hostRunner } from '../../src/enforcers/network/run.js';
import { canRunLab } from '../lab/index.js';

describe.skipIf(!canRunLab)('leash demo', () => {
  it('runs every step as the default policy says, then leaves no namespace or account behind', async () => {
    let text = '';
    const code = await runDemo({ id: 'netdm', account: 'leash-demo', json: true, out: (s) => (text += s) });
    const json = text.slice(text.indexOf('['));
    const rows = JSON.parse(json) as {
      title: string;
      expect: string;
      result: string;
      decisions: { reason: string }[];
    }[];
    expect(rows.length).toBeGreaterThanOrEqual(10);
    for (const r of rows) expect({ title: r.title, result: r.result }).toEqual({ title: r.title, result: r.expect });
    expect(rows.find((r) => r.title.startsWith('HTTPS to pastebin'))?.decisions[0]?.reason).toBe('not_allowed');
    expect(code).toBe(0);
    const host = hostRunner();
    expect((await host(['ip', 'netns', 'list'])).stdout).not.toMatch(/lt-netdm-/);
    expect((await host(['id', 'leash-demo'])).code).not.toBe(0);
  });
});
