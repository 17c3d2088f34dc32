import { describe, expect, it } from 'vitest';
import type { AskRequest } from '../../../../src/engine/approval.js';
import type { DecisionRecord } from '../../../../src/log/decisions.js';
import { judgePeer } from '../../../../src/control/approvals/peer.js';
import { createApprovalQueue, type ApprovalSettings } from '../../../../src/control/approvals/queue.js';

const settings = (over: Partial<ApprovalSettings> = {}): ApprovalSettings => ({
  deadlines: { network: 30, filesystem: 10, commands: 10, tools: 120 },
  max_pending: 1000,
  max_pending_per_subject: 200,
  session_seconds: 3600,
  ...over,
});

function setup(over: Partial<ApprovalSettings> = {}, persist?: () => Promise<void>) {
  const lines: DecisionRecord[] = [];
  const q = createApprovalQueue({
    log: { write: (r) => (lines.push(r), 'ref') },
    settings: () => settings(over),
    accountOf: (uid) => `leash-t${uid}`,
    ...(persist ? { persist } : {}),
  });
  const unsub = q.subscribe(() => {});
  return { q, lines, unsub };
}

const req = (over: Partial<AskRequest> = {}): AskRequest => ({
  uid: 2001,
  surface: 'network',
  what: { domain: 'api.lab', ip: '198.18.0.9', port: 443 },
  rule: 'api.lab',
  sessionKey: 'api.lab:443',
  persistEntry: 'api.lab:443',
  ...over,
});
const root = { uid: 0, account: 'root' };

describe('approvals queue', () => {
  it('holds a request until decided once, writes the ask line, and refuses a second decision', async () => {
    const { q, lines } = setup();
    const p = q.ask(req());
    const [view] = q.list();
    expect(view).toMatchObject({ uid: 2001, account: 'leash-t2001', surface: 'network', rule: 'api.lab' });
    expect(lines).toEqual([
      expect.objectContaining({
        action: 'ask',
        reason: 'ask_entry',
        approval: expect.objectContaining({ request: view!.id }),
      }),
    ]);
    await q.decide(view!.id, 'once', root);
    await expect(p).resolves.toMatchObject({ action: 'allow', reason: 'approved_once', how: 'once', by: root });
    await expect(q.decide(view!.id, 'deny', root)).rejects.toMatchObject({ code: 'approval_not_found' });
    // once: the next one asks again
    void q.ask(req());
    expect(q.list()).toHaveLength(1);
    q.close();
  });

  it('counts what the metrics show: held by surface, decided by outcome, timeouts', async () => {
    const { q } = setup({ deadlines: { network: 30, filesystem: 10, commands: 10, tools: 0.05 } });
    const a = q.ask(req());
    const t = q.ask(req({ surface: 'tools', sessionKey: 'read_file' }));
    expect(q.counts().pending).toEqual({ network: 1, filesystem: 0, commands: 0, tools: 1 });
    await expect(t).resolves.toMatchObject({ reason: 'approval_timeout' });
    const net = q.list().find((v) => v.surface === 'network')!;
    await q.decide(net.id, 'deny', root);
    await a;
    const c = q.counts();
    expect(c.pending).toEqual({ network: 0, filesystem: 0, commands: 0, tools: 0 });
    expect(c.timeouts).toEqual({ network: 0, filesystem: 0, commands: 0, tools: 1 });
    expect(c.decided).toEqual({ 'tools\0approval_timeout': 1, 'network\0approval_denied': 1 });
    q.close();
  });

  it('blocks at once with approval_unavailable when nobody is subscribed, whatever the request', async () => {
    const { q, unsub } = setup();
    unsub();
    await expect(q.ask(req())).resolves.toMatchObject({
      action: 'block',
      reason: 'approval_unavailable',
      request: null,
    });
    expect(q.list()).toEqual([]);
  });

  it('a passed deadline is a block (approval_timeout), never an allow', async () => {
    const { q } = setup();
    await expect(q.ask(req({ deadlineMs: 30 }))).resolves.toMatchObject({
      action: 'block',
      reason: 'approval_timeout',
    });
    expect(q.list()).toEqual([]);
  });

  it('session: the same subject, surface and key pass without asking; another subject still asks; a reconcile ends it', async () => {
    const { q } = setup();
    const p = q.ask(req());
    await q.decide(q.list()[0]!.id, 'session', root);
    await expect(p).resolves.toMatchObject({ action: 'allow', reason: 'approved_session' });
    await expect(q.ask(req())).resolves.toMatchObject({ action: 'allow', reason: 'approved_session', request: null });
    void q.ask(req({ uid: 2002 }));
    expect(q.list().map((v) => v.uid)).toEqual([2002]);
    q.endSessions(2001);
    void q.ask(req());
    expect(
      q
        .list()
        .map((v) => v.uid)
        .sort(),
    ).toEqual([2001, 2002]);
    q.close();
  });

  it('bounded per subject and in total: beyond the bound asks are blocked at once (approval_limit)', async () => {
    const { q } = setup({ max_pending: 3, max_pending_per_subject: 2 });
    void q.ask(req());
    void q.ask(req());
    await expect(q.ask(req())).resolves.toMatchObject({ reason: 'approval_limit' });
    void q.ask(req({ uid: 2002 }));
    await expect(q.ask(req({ uid: 2003 }))).resolves.toMatchObject({ reason: 'approval_limit' });
    expect(q.list()).toHaveLength(3);
    q.close();
  });

  it('close (the service stopping) answers every pending request with a block, never an allow', async () => {
    const { q } = setup();
    const ps = [q.ask(req()), q.ask(req({ surface: 'tools', what: { name: 'run_shell' } })), q.ask(req({ uid: 2002 }))];
    q.close();
    for (const o of await Promise.all(ps)) expect(o).toMatchObject({ action: 'block', reason: 'approval_cancelled' });
    await expect(q.ask(req())).resolves.toMatchObject({ action: 'block' });
  });

  it('an aborted action leaves the queue (the connection closed)', async () => {
    const { q } = setup();
    const ac = new AbortController();
    const p = q.ask(req({ signal: ac.signal }));
    ac.abort();
    await expect(p).resolves.toMatchObject({ action: 'block', reason: 'approval_cancelled' });
    expect(q.list()).toEqual([]);
  });

  it('persist: a failed write keeps the request pending; a good one allows and passes later ones until reconcile', async () => {
    let fail = true;
    const { q } = setup({}, async () => {
      if (fail) throw new Error('profile shared');
    });
    const p = q.ask(req());
    const id = q.list()[0]!.id;
    await expect(q.decide(id, 'persist', root)).rejects.toMatchObject({ code: 'approval_persist_failed' });
    expect(q.list()).toHaveLength(1);
    fail = false;
    await q.decide(id, 'persist', root);
    await expect(p).resolves.toMatchObject({ action: 'allow', reason: 'approved_persist', how: 'persist' });
    await expect(q.ask(req())).resolves.toMatchObject({ action: 'allow', reason: 'approved_session' });
  });

  it('1,000 pending across surfaces decided by a script: none lost, none decided twice', async () => {
    const { q } = setup({ max_pending: 1000, max_pending_per_subject: 1000 });
    const surfaces = ['network', 'filesystem', 'commands', 'tools'] as const;
    const ps = Array.from({ length: 1000 }, (_, i) => q.ask(req({ surface: surfaces[i % 4], sessionKey: `k${i}` })));
    const ids = q.list().map((v) => v.id);
    expect(new Set(ids).size).toBe(1000);
    const results = await Promise.allSettled(
      ids.flatMap((id, i) => [q.decide(id, i % 2 ? 'once' : 'deny', root), q.decide(id, 'once', root)]),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1000);
    const outcomes = await Promise.all(ps);
    expect(outcomes.filter((o) => o.action === 'allow')).toHaveLength(500);
    expect(q.list()).toEqual([]);
  });
});

describe('approvals socket peer rule (four UIDs)', () => {
  const subjects = new Set([2001]);
  const isSubject = (u: number) => subjects.has(u);
  it.each<[string, { uid: number; uids: [number, number, number, number] }, number | null, boolean]>([
    ['root', { uid: 0, uids: [0, 0, 0, 0] }, null, true],
    ['the operator', { uid: 1000, uids: [1000, 1000, 1000, 1000] }, 1000, true],
    ['another account', { uid: 1001, uids: [1001, 1001, 1001, 1001] }, 1000, false],
    ['the subject itself', { uid: 2001, uids: [2001, 2001, 2001, 2001] }, 2001, false],
    ['a setuid-root helper the subject started (real UID the subject)', { uid: 0, uids: [2001, 0, 0, 0] }, null, false],
    ['root with a saved UID of the subject', { uid: 0, uids: [0, 0, 2001, 0] }, null, false],
    ['a pid now naming another process (effective UID changed)', { uid: 2001, uids: [0, 0, 0, 0] }, null, false],
  ])('%s', (_n, ids, operator, ok) => {
    expect(judgePeer({ pid: 1, ...ids }, isSubject, operator).ok).toBe(ok);
  });
  it('a peer that cannot be identified is refused', () => {
    expect(judgePeer(null, isSubject, null).ok).toBe(false);
  });
});
