import { describe, expect, it } from 'vitest';
import { applySubjects } from '../../../../src/dataplane/network/nft/apply.js';
import { renderIptables } from '../../../../src/dataplane/network/nft/iptables.js';
import { onKernelReadFallback, readState } from '../../../../src/dataplane/network/nft/read.js';
import {
  GUARD_COMMENT,
  guardRules,
  isApplied,
  isGuardApplied,
  renderApply,
  renderRelease,
  renderSubject,
  type RulesetState,
  type TableState,
} from '../../../../src/dataplane/network/nft/render.js';

const base = { uid: 1001, port: 18001, dnsPort: 18501, udp: 'drop' as const };

function table(partial: Partial<TableState> = {}): TableState {
  return { exists: true, dispatch: [], elements: new Map(), foreign: [], chains: new Map(), ...partial };
}

function stateWith(r: ReturnType<typeof renderSubject>, dispatchHandles = [7]): RulesetState {
  const c = `leash:${r.uid}:${r.hash}`;
  const el = () => new Map([[r.uid, r.chain]]);
  return new Map([
    ['ip leash', table({ dispatch: dispatchHandles, elements: el(), chains: new Map([[r.chain, r.ip.map(() => c)]]) })],
    ['ip6 leash', table({ dispatch: [8], elements: el(), chains: new Map([[r.chain, r.ip6.map(() => c)]]) })],
    [
      'inet leash_filter',
      table({
        dispatch: [9],
        elements: el(),
        chains: new Map([
          ['input', guardRules().map(() => GUARD_COMMENT)],
          [r.chain, r.filter.map(() => c)],
        ]),
      }),
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
      'ip daddr 127.0.0.1 tcp dport 18001 return',
      'ip daddr 127.0.0.1 tcp dport 18501 return',
      'ip6 daddr ::1 tcp dport 18001 return',
      'ip6 daddr ::1 tcp dport 18501 return',
      'ct direction reply ct state established return',
      'drop',
    ]);
  });

  it('a sealed subject has no redirect at all: its TCP is reset and everything else dropped; iptables cannot seal', () => {
    const r = renderSubject({ uid: 1001, port: 0, dnsPort: 0, udp: 'allow', sealed: true });
    expect(r.ip).toEqual([]);
    expect(r.ip6).toEqual([]);
    expect(r.filter).toEqual(['meta l4proto tcp reject with tcp reset', 'drop']);
    expect(r.hash).not.toBe(renderSubject({ uid: 1001, port: 18000, dnsPort: 18500, udp: 'drop' }).hash);
    expect(() => renderIptables({ uid: 1001, port: 0, dnsPort: 0, udp: 'drop', sealed: true })).toThrow(/cannot seal/);
  });

  it('lifts the UDP filter with udp: allow', () => {
    expect(renderSubject({ ...base, udp: 'allow' }).filter).toEqual([
      'meta l4proto udp return',
      'meta l4proto != tcp drop',
      'ip daddr 127.0.0.1 tcp dport 18001 return',
      'ip daddr 127.0.0.1 tcp dport 18501 return',
      'ip6 daddr ::1 tcp dport 18001 return',
      'ip6 daddr ::1 tcp dport 18501 return',
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

  it('an empty ruleset gets tables, hooked chains, a dispatch map and its one rule per table, the chain and its element', () => {
    const r = renderSubject(base);
    const script = renderApply(new Map(), r);
    expect(script).toContain('add chain ip leash output { type nat hook output priority -100; policy accept; }');
    expect(script).toContain(
      'add chain inet leash_filter output { type filter hook output priority 0; policy accept; }',
    );
    expect(script.match(/add map \S+ \S+ agents \{ type uid : verdict; \}/g)).toHaveLength(3);
    expect(script.match(/add rule \S+ \S+ output meta skuid vmap @agents comment "leash:dispatch"/g)).toHaveLength(3);
    expect(script.match(/add element \S+ \S+ agents \{ 1001 : jump agent_1001 \}/g)).toHaveLength(3);
    // Only this subject's chain and the guard are flushed; never the dispatching chains, never a table.
    expect(script).not.toMatch(/flush chain \S+ \S+ output|flush ruleset|flush table|delete table/);
    expect(script.match(/flush chain/g)).toHaveLength(4);
    expect(script).toContain(
      'add chain inet leash_filter input { type filter hook input priority 0; policy accept; }\n' +
        'flush chain inet leash_filter input\n' +
        'add rule inet leash_filter input ct direction original ct status dnat tcp dport 18000-20999 tcp flags & (syn | ack) == syn ' +
        'socket mark != 0x1ea5e counter reject with tcp reset comment "leash:guard"\n' +
        'add rule inet leash_filter input ct direction original ct status dnat udp dport 18000-20999 socket mark != 0x1ea5e counter drop ' +
        'comment "leash:guard"\n',
    );
  });

  it('the guard is written when missing or altered, and left alone when in shape', () => {
    const r = renderSubject(base);
    expect(isGuardApplied(stateWith(r))).toBe(true);
    expect(renderApply(stateWith(r), r)).not.toContain(' input');
    const none = stateWith(r);
    none.get('inet leash_filter')!.chains.delete('input');
    expect(isGuardApplied(none)).toBe(false);
    expect(renderApply(none, [])).toContain('flush chain inet leash_filter input');
    const altered = stateWith(r);
    altered.get('inet leash_filter')!.chains.get('input')!.pop();
    expect(isGuardApplied(altered)).toBe(false);
  });

  it('many subjects in one transaction share the one dispatch rule per table, each with its own element', () => {
    const rs = [1001, 1002, 1003].map((uid, i) => renderSubject({ ...base, uid, port: 18001 + i }));
    const script = renderApply(new Map(), rs);
    expect(script.match(/output meta skuid vmap @agents/g)).toHaveLength(3);
    for (const r of rs)
      expect(script.match(new RegExp(`agents \\{ ${r.uid} : jump ${r.chain} \\}`, 'g'))).toHaveLength(3);
  });

  it('a re-apply keeps the existing dispatch rule and element, and removes duplicate dispatch rules by handle', () => {
    const r = renderSubject(base);
    const script = renderApply(stateWith(r, [7, 12]), r);
    expect(script).not.toContain('vmap @agents comment');
    expect(script).not.toContain('element');
    expect(script).toContain('delete rule ip leash output handle 12');
  });

  it('an element that jumps elsewhere is replaced in the same transaction', () => {
    const r = renderSubject(base);
    const st = stateWith(r);
    st.get('ip6 leash')!.elements.set(1001, 'agent_9');
    const script = renderApply(st, r);
    expect(script).toContain(
      'delete element ip6 leash agents { 1001 }\nadd element ip6 leash agents { 1001 : jump agent_1001 }',
    );
    expect(script).not.toContain('element ip leash');
  });

  it('recognises an applied subject, and sees a changed or tampered one', () => {
    const r = renderSubject(base);
    expect(isApplied(stateWith(r), r)).toBe(true);
    expect(isApplied(stateWith(r, [7, 12]), r)).toBe(false);
    const noElement = stateWith(r);
    noElement.get('inet leash_filter')!.elements.delete(1001);
    expect(isApplied(noElement, r)).toBe(false);
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
      for (const [u, c] of t.elements) mine.elements.set(u, c);
      for (const [c, l] of t.chains) mine.chains.set(c, l);
    }
    const one = renderRelease(st, [1001]);
    // The element before the chain it jumps to, in each table; the dispatch rule stays for the other subject.
    expect(one).toContain('delete element ip leash agents { 1001 }\ndelete chain ip leash agent_1001');
    expect(one).toContain('delete chain ip6 leash agent_1001');
    expect(one).not.toContain('1002');
    expect(one).not.toMatch(/delete table|delete rule|flush/);
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
      // nft -i lists each asked object; on empty tables each list is an ENOENT on stderr, and the exit code is 0.
      if (argv.includes('-i'))
        return { code: 0, stdout: '', stderr: (input ?? '').replace(/^.+$/gm, 'Error: No such file or directory') };
      if (argv[1] === '-j') return { code: 1, stdout: '', stderr: 'Error: No such file or directory' };
      if (refuse !== null && input?.includes(refuse)) return { code: 1, stdout: '', stderr: 'Error: refused' };
      return { code: 0, stdout: '', stderr: '' };
    };
    return { calls, run };
  }
  const subjects = Array.from({ length: 5 }, (_, i) => ({ ...base, uid: 2001 + i, port: 18101 + i }));

  it("reads only these subjects' chains (one nft -i) and applies every subject in one nft -f", async () => {
    const { calls, run } = fakeNft(null);
    const out = await applySubjects(run, subjects);
    expect([...out.values()]).toEqual(Array(5).fill('added'));
    const applies = calls.filter((c) => c.argv.includes('-f'));
    expect(applies).toHaveLength(1);
    expect(calls).toHaveLength(2); // one scoped listing and the transaction
    const asked = calls[0]!.input!.trim().split('\n');
    // Per table: hooked chain, map, each subject's chain; the filter table's guard chain.
    expect(asked).toHaveLength(3 * (2 + subjects.length) + 1);
    expect(asked.filter((l) => /agent_/.test(l)).every((l) => subjects.some((s) => l.endsWith(`agent_${s.uid}`)))).toBe(
      true,
    );
    for (const s of subjects) expect(applies[0]!.input).toContain(`agents { ${s.uid} : jump agent_${s.uid} }`);
  });

  it('a start with many subjects reads the tables whole, once', async () => {
    const { calls, run } = fakeNft(null);
    const many = Array.from({ length: 200 }, (_, i) => ({
      ...base,
      uid: 3001 + i,
      port: 18201 + i,
      dnsPort: 19001 + i,
    }));
    const out = await applySubjects(run, many);
    expect([...out.values()].every((o) => o === 'added')).toBe(true);
    expect(calls.map((c) => c.argv.slice(1, 4).join(' '))).toEqual(['-j -a list', '-j -a list', '-j -a list', '-f -']);
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

describe('readState for some subjects (nft -i)', () => {
  // What nft 1.0.6 prints for `list chain ... output`, `list map ... agents` and an agent chain, a document a line.
  const meta = { metainfo: { version: '1.0.6', json_schema_version: 1 } };
  const docs = [
    [
      { chain: { family: 'ip', table: 'leash', name: 'output', handle: 1, type: 'nat', hook: 'output', prio: -100 } },
      {
        rule: {
          family: 'ip',
          table: 'leash',
          chain: 'output',
          handle: 3,
          comment: 'leash:dispatch',
          expr: [{ vmap: { key: { meta: { key: 'skuid' } }, data: '@agents' } }],
        },
      },
      {
        rule: {
          family: 'ip',
          table: 'leash',
          chain: 'output',
          handle: 4,
          expr: [{ match: { op: '==', left: { meta: { key: 'skuid' } }, right: 5 } }, { jump: { target: 'agent_5' } }],
        },
      },
    ],
    [
      {
        map: {
          family: 'ip',
          name: 'agents',
          table: 'leash',
          type: 'uid',
          handle: 2,
          map: 'verdict',
          elem: [
            [5, { jump: { target: 'agent_5' } }],
            [6, { jump: { target: 'agent_6' } }],
          ],
        },
      },
    ],
    [
      { chain: { family: 'ip', table: 'leash', name: 'agent_5', handle: 9 } },
      { rule: { family: 'ip', table: 'leash', chain: 'agent_5', handle: 10, comment: 'leash:5:abc', expr: [] } },
    ],
  ];
  const stdout = docs.map((d) => JSON.stringify({ nftables: [meta, ...d] })).join('\n') + '\n';

  it('files each object under its table: the dispatch rule, an older rule as foreign, every element, the asked chain', async () => {
    const st = await readState(async () => ({ code: 0, stdout, stderr: 'Error: No such file or directory\n' }), [5]);
    const ip = st.get('ip leash')!;
    expect(ip.exists).toBe(true);
    expect(ip.dispatch).toEqual([3]);
    expect(ip.foreign).toEqual([4]);
    expect([...ip.elements]).toEqual([
      [5, 'agent_5'],
      [6, 'agent_6'],
    ]);
    expect([...ip.chains]).toEqual([['agent_5', ['leash:5:abc']]]);
    expect(st.get('ip6 leash')!.exists).toBe(false);
  });

  it('an error other than "not there" is nft_failed, naming it', async () => {
    const run = async () => ({ code: 0, stdout: '', stderr: 'Error: Operation not permitted\n' });
    await expect(readState(run, [5])).rejects.toMatchObject({ code: 'nft_failed', message: /Operation not permitted/ });
  });

  it('an nft without its interactive CLI is read whole instead', async () => {
    const calls: string[][] = [];
    const run = async (argv: string[]) => {
      calls.push(argv);
      if (argv.includes('-i'))
        return { code: 1, stdout: '', stderr: 'Error: interactive CLI not supported in this build' };
      return { code: 1, stdout: '', stderr: 'Error: No such file or directory' };
    };
    const st = await readState(run, [5]);
    expect(calls).toHaveLength(4);
    expect([...st.values()].every((t) => !t.exists)).toBe(true);
  });
});

describe('readState when the kernel read cannot be used', () => {
  it('reads through nft instead, and says why once per reason', async () => {
    const told: string[] = [];
    onKernelReadFallback((why) => told.push(why));
    try {
      // A namespace that does not exist: the addon cannot enter it (or the addon is missing); either way a reason.
      const run = Object.assign(async () => ({ code: 0, stdout: '', stderr: '' }), {
        netns: '/run/netns/leash-unit-no-such-ns',
      });
      const a = await readState(run, [5]);
      const b = await readState(run, [5]);
      expect([...a.values()].every((t) => !t.exists)).toBe(true);
      expect([...b.values()].every((t) => !t.exists)).toBe(true);
      expect(told).toHaveLength(1);
      expect(told[0]).toMatch(/\S/);
    } finally {
      onKernelReadFallback(null);
    }
  });
});
