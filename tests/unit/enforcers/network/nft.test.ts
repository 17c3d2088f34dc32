import { describe, expect, it } from 'vitest';
import {
  applySubjects,
  isApplied,
  renderApply,
  renderIptables,
  renderRelease,
  renderSubject,
  type RulesetState,
  type TableState,
} from '../../../../src/enforcers/network/nft.js';

const base = { uid: 1001, port: 18001, dnsPort: 18501, udp: 'drop' as const };

function table(partial: Partial<TableState> = {}): TableState {
  return { exists: true, dispatch: new Map(), foreign: [], chains: new Map(), ...partial };
}

function stateWith(r: ReturnType<typeof renderSubject>, dispatchHandles = [7]): RulesetState {
  const c = `leash:${r.uid}:${r.hash}`;
  return new Map([
    [
      'ip leash',
      table({ dispatch: new Map([[r.uid, dispatchHandles]]), chains: new Map([[r.chain, r.ip.map(() => c)]]) }),
    ],
    ['ip6 leash', table({ dispatch: new Map([[r.uid, [8]]]), chains: new Map([[r.chain, r.ip6.map(() => c)]]) })],
    [
      'inet leash_filter',
      table({ dispatch: new Map([[r.uid, [9]]]), chains: new Map([[r.chain, r.filter.map(() => c)]]) }),
    ],
  ]);
}

describe('nft rendering', () => {
  it('sends all port-53 UDP and TCP to the forwarder first, then all other TCP, loopback included (nothing exempt)', () => {
    const r = renderSubject(base);
    expect(r.chain).toBe('agent_1001');
    expect(r.ip).toEqual([
      'udp dport 53 redirect to :18501',
      'tcp dport 53 redirect to :18501',
      'meta l4proto tcp redirect to :18001',
    ]);
    expect(r.ip6).toEqual([
      'udp dport 53 redirect to :18501',
      'tcp dport 53 redirect to :18501',
      'meta l4proto tcp redirect to :18001',
    ]);
  });

  it('lets UDP out only to its own forwarder and TCP only to its own listener or forwarder after nat, both families', () => {
    const r = renderSubject(base);
    expect(r.filter).toEqual([
      'ip daddr 127.0.0.1 udp dport 18501 return',
      'ip6 daddr ::1 udp dport 18501 return',
      'meta l4proto != tcp drop',
      'ip daddr 127.0.0.1 tcp dport { 18001, 18501 } return',
      'ip6 daddr ::1 tcp dport { 18001, 18501 } return',
      'ct direction reply ct state established return',
      'drop',
    ]);
  });

  it('lifts the UDP filter with udp: allow', () => {
    expect(renderSubject({ ...base, udp: 'allow' }).filter).toEqual([
      'meta l4proto udp return',
      'meta l4proto != tcp drop',
      'ip daddr 127.0.0.1 tcp dport { 18001, 18501 } return',
      'ip6 daddr ::1 tcp dport { 18001, 18501 } return',
      'ct direction reply ct state established return',
      'drop',
    ]);
  });

  it('refuses a port that is not one (it would be rendered into the ruleset)', () => {
    expect(() => renderSubject({ ...base, dnsPort: 0 })).toThrow(/DNS forwarder port/);
    expect(() => renderSubject({ ...base, dnsPort: 18001 })).toThrow(/DNS forwarder port/);
    expect(() => renderSubject({ ...base, port: 0 })).toThrow(/port/);
    expect(() => renderSubject({ ...base, uid: -1 })).toThrow(/uid/);
  });

  it('fingerprints the rendering so a change of port, DNS port or udp mode is a change', () => {
    const h = renderSubject(base).hash;
    expect(renderSubject({ ...base }).hash).toBe(h);
    expect(renderSubject({ ...base, port: 18002 }).hash).not.toBe(h);
    expect(renderSubject({ ...base, dnsPort: 18502 }).hash).not.toBe(h);
    expect(renderSubject({ ...base, udp: 'allow' }).hash).not.toBe(h);
  });

  it('an empty ruleset gets tables, hooked dispatchers, the chain and one dispatch rule per table', () => {
    const r = renderSubject(base);
    const script = renderApply(new Map(), r);
    expect(script).toContain('add chain ip leash output { type nat hook output priority -100; policy accept; }');
    expect(script).toContain(
      'add chain inet leash_filter output { type filter hook output priority 0; policy accept; }',
    );
    expect(script.match(/add rule \S+ \S+ output meta skuid 1001 jump agent_1001/g)).toHaveLength(3);
    // Only this subject's chain is flushed; never a shared (hooked) chain, never a table.
    expect(script).not.toMatch(/flush chain \S+ \S+ output|flush ruleset|flush table|delete table/);
    expect(script.match(/flush chain/g)).toHaveLength(3);
  });

  it('a re-apply keeps the existing dispatch rule and removes duplicates by handle', () => {
    const r = renderSubject(base);
    const script = renderApply(stateWith(r, [7, 12]), r);
    expect(script).not.toContain('jump agent_1001 comment');
    expect(script).toContain('delete rule ip leash output handle 12');
  });

  it('recognises an applied subject, and sees a changed or tampered one', () => {
    const r = renderSubject(base);
    expect(isApplied(stateWith(r), r)).toBe(true);
    expect(isApplied(stateWith(r, [7, 12]), r)).toBe(false);
    expect(isApplied(stateWith(r), renderSubject({ ...base, port: 18005 }))).toBe(false);
    const tampered = stateWith(r);
    tampered.get('ip leash')!.chains.get('agent_1001')!.push(null);
    expect(isApplied(tampered, r)).toBe(false);
    expect(isApplied(new Map(), r)).toBe(false);
  });

  it('releasing one of two subjects deletes only its rules and chain; the last one drops the tables', () => {
    const a = renderSubject(base);
    const b = renderSubject({ ...base, uid: 1002, port: 18002 });
    const st = stateWith(a);
    for (const [k, t] of stateWith(b)) {
      const mine = st.get(k)!;
      for (const [u, h] of t.dispatch)
        mine.dispatch.set(
          u,
          h.map((x) => x + 100),
        );
      for (const [c, l] of t.chains) mine.chains.set(c, l);
    }
    const one = renderRelease(st, [1001]);
    expect(one).toContain('delete rule ip leash output handle 7');
    expect(one).toContain('delete chain ip6 leash agent_1001');
    expect(one).not.toContain('agent_1002');
    expect(one).not.toMatch(/delete table|flush/);
    const both = renderRelease(st, [1001, 1002]);
    expect(both.trim().split('\n')).toEqual([
      'delete table ip leash',
      'delete table ip6 leash',
      'delete table inet leash_filter',
    ]);
    expect(renderRelease(new Map(), [1001])).toBe('');
  });

  it('renders the iptables fallback in iptables -S canonical form', () => {
    expect(renderIptables({ ...base, port: 18443 })).toEqual([
      '-A OUTPUT -p tcp -m owner --uid-owner 1001 -m comment --comment "leash:1001" -j REDIRECT --to-ports 18443',
    ]);
  });
});

describe('applySubjects: many subjects, one transaction', () => {
  /** A runner over empty leash tables that records each nft run and refuses a script naming `refuse`. */
  function fakeNft(refuse: string | null) {
    const calls: { argv: string[]; input?: string }[] = [];
    const run = async (argv: string[], input?: string) => {
      calls.push({ argv, input });
      if (argv[1] === '-j') return { code: 1, stdout: '', stderr: 'Error: No such file or directory' };
      if (refuse !== null && input?.includes(refuse)) return { code: 1, stdout: '', stderr: 'Error: refused' };
      return { code: 0, stdout: '', stderr: '' };
    };
    return { calls, run };
  }
  const subjects = Array.from({ length: 5 }, (_, i) => ({ ...base, uid: 2001 + i, port: 18101 + i }));

  it('reads the tables once and applies every subject in one nft -f, whatever their number', async () => {
    const { calls, run } = fakeNft(null);
    const out = await applySubjects(run, subjects);
    expect([...out.values()]).toEqual(Array(5).fill('added'));
    const applies = calls.filter((c) => c.argv.includes('-f'));
    expect(applies).toHaveLength(1);
    expect(calls).toHaveLength(4); // three table listings and the transaction
    for (const s of subjects) expect(applies[0]!.input).toContain(`meta skuid ${s.uid} jump agent_${s.uid}`);
  });

  it('a transaction the kernel refuses is retried subject by subject, so the bad one fails alone', async () => {
    const { run } = fakeNft('agent_2003');
    const out = await applySubjects(run, subjects);
    expect(out.get(2003)).toBeInstanceOf(Error);
    for (const uid of [2001, 2002, 2004, 2005]) expect(out.get(uid)).toBe('added');
  });

  it('a subject that cannot be rendered fails alone before anything is applied', async () => {
    const { calls, run } = fakeNft(null);
    const out = await applySubjects(run, [...subjects.slice(0, 2), { ...base, uid: 2999, dnsPort: -5 }]);
    expect(out.get(2999)).toBeInstanceOf(Error);
    expect(out.get(2001)).toBe('added');
    expect(calls.filter((c) => c.argv.includes('-f'))).toHaveLength(1);
  });
});
