import { describe, expect, it } from 'vitest';
import { GATE_DEFAULTS } from '../../../src/tools/judge/fields.js';
import { compileGatePolicy, type ToolsGatePolicy } from '../../../src/tools/judge/compile.js';
import { judgeRequest } from '../../../src/tools/judge/decide.js';
import { createLocalJudge } from '../../../src/tools/judge/judge.js';
import { judge } from '../../../src/tools/terminal/verdict.js';
import { engineDeciderFactory } from '../../../src/tools/terminal/decider.js';
import { validateTerminalPolicy } from '../../../src/tools/terminal/policy-file.js';
import type { DecisionRecord } from '../../../src/log/decisions.js';
import { GATE_ENGINE } from '../../../src/tools/judge/compile.js';

const gate = (shadow: boolean, over: Partial<ToolsGatePolicy> = {}) =>
  compileGatePolicy(
    {
      mode: 'whitelist',
      allow: ['read_file'],
      deny: ['delete_all'],
      inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' },
      ...GATE_DEFAULTS,
      ...over,
    },
    'closed',
    GATE_ENGINE,
    { shadow },
  );

describe('shadow mode on the tools gate', () => {
  it('a call the policy denies is relayed, carrying the denial it would have been', () => {
    const p = { name: 'delete_all', arguments: {} };
    expect(judgeRequest('tools/call', p, gate(false))).toMatchObject({ action: 'deny', reason: 'deny_entry' });
    expect(judgeRequest('tools/call', p, gate(true))).toMatchObject({
      action: 'allow',
      wouldBlock: { reason: 'deny_entry', rule: 'delete_all' },
    });
    expect(judgeRequest('tools/call', { name: 'other' }, gate(true))).toMatchObject({
      action: 'allow',
      wouldBlock: { reason: 'not_allowed' },
    });
    const ok = judgeRequest('tools/call', { name: 'read_file' }, gate(true));
    expect(ok.action === 'allow' && ok.wouldBlock).toBeUndefined();
  });
  it('the line written is would_block with the block reason and rule', () => {
    const lines: DecisionRecord[] = [];
    const j = createLocalJudge({ policy: gate(true), log: { write: (r) => (lines.push(r), 'ref') }, uid: 2001 });
    void j.judge('tools/call', { name: 'delete_all', arguments: { x: 1 } }, false);
    void j.judge('tools/call', { name: 'read_file' }, false);
    expect(lines.map((l) => [l.action, l.reason, l.rule])).toEqual([
      ['would_block', 'deny_entry', 'delete_all'],
      ['allow', 'allow_entry', 'read_file'],
    ]);
  });
});

describe('shadow mode in leash terminal', () => {
  const at = { path: '/usr/bin/rm', real: '/usr/bin/rm', error: null };
  const base = { fail_mode: 'closed', commands: { mode: 'whitelist', allow: ['ls'], deny: [] } };
  it('a command the policy refuses runs, marked wouldBlock with the refusal', () => {
    const enforced = validateTerminalPolicy(base);
    const shadow = validateTerminalPolicy({ ...base, enforce: 'shadow' });
    const f = engineDeciderFactory();
    expect(judge(['rm', '-rf', 'x'], at, enforced, f(enforced))).toMatchObject({
      allowed: false,
      reason: 'not_allowed',
    });
    const s = judge(['rm', '-rf', 'x'], at, shadow, f(shadow));
    expect(s).toMatchObject({ allowed: true, wouldBlock: true, reason: 'not_allowed' });
  });
  it('refuses an enforce value it does not know', () => {
    expect(() => validateTerminalPolicy({ ...base, enforce: 'off' })).toThrow(/enforce/);
  });
});
