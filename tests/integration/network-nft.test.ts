import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { teardownNetwork } from '../../src/dataplane/network/enforcer.js';
import {
  applySubject,
  applySubjects,
  dropLegacyShape,
  releaseSubjects,
} from '../../src/dataplane/network/nft/apply.js';
import { openFirewall } from '../../src/dataplane/network/nft/firewall.js';
import { readState, readStateByProgram } from '../../src/dataplane/network/nft/read.js';
import type { SubjectRules } from '../../src/dataplane/network/nft/render.js';
import { netnsRunner, type Runner } from '../../src/dataplane/network/nft/run.js';
import { bareNetns, isRoot } from '../lab/index.js';
import { requireProgram } from '../lab/prereq.js';

const NS = 'lt-net-nft';
const a: SubjectRules = { uid: 61001, port: 18001, dnsPort: 18501, udp: 'drop' };
const b: SubjectRules = { uid: 61002, port: 18002, dnsPort: 18502, udp: 'drop' };

describe.skipIf(!isRoot)('nft apply in a namespace', () => {
  let run: Runner;
  let cleanup: (() => Promise<void>) | null = null;
  beforeAll(async () => {
    cleanup = await bareNetns(NS);
    run = netnsRunner(NS);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  const listing = async () => (await run(['nft', '-a', 'list', 'ruleset'])).stdout;
  /** Per table: the dispatch rule's handle, the UID's element, and the handles of the UID's chain and rules. */
  const handlesOf = async (uid: number) => {
    const json = JSON.parse((await run(['nft', '-j', '-a', 'list', 'ruleset'])).stdout) as {
      nftables: Record<string, { chain?: string; name?: string; handle?: number }>[];
    };
    const mine = json.nftables
      .filter(
        (i) =>
          (i.rule && (i.rule.chain === `agent_${uid}` || i.rule.chain === 'output')) ||
          i.chain?.name === `agent_${uid}`,
      )
      .map((i) => (i.rule ? `rule ${i.rule.chain}#${i.rule.handle}` : `chain #${i.chain!.handle}`));
    const st = await readState(run, [uid]);
    return { mine, elements: [...st.values()].map((t) => t.elements.get(uid)) };
  };

  it('adds subjects one transaction each, each in its own chain behind one dispatch map', async () => {
    expect(await applySubject(run, a)).toBe('added');
    expect(await applySubject(run, b)).toBe('added');
    const text = await listing();
    for (const fam of ['table ip leash', 'table ip6 leash', 'table inet leash_filter']) expect(text).toContain(fam);
    // One dispatch rule per hooked chain, whatever the number of subjects; each subject an element of its map.
    expect(text.match(/meta skuid vmap @agents/g)).toHaveLength(3);
    expect(text.match(/61001 : jump agent_61001/g)).toHaveLength(3);
    expect(text.match(/61002 : jump agent_61002/g)).toHaveLength(3);
    expect(text).toContain('redirect to :18001');
    expect(text).toContain('redirect to :18002');
  });

  it('applying an unchanged subject changes nothing (same handles, same ruleset)', async () => {
    const before = await listing();
    expect(await applySubject(run, a)).toBe('unchanged');
    expect(await listing()).toBe(before);
  });

  it('changing one subject leaves the other one untouched, handle for handle', async () => {
    const bBefore = await handlesOf(b.uid);
    const bChain = (await run(['nft', '-a', 'list', 'chain', 'ip', 'leash', 'agent_61002'])).stdout;
    expect(await applySubject(run, { ...a, port: 18011 })).toBe('changed');
    expect(await handlesOf(b.uid)).toEqual(bBefore);
    expect((await run(['nft', '-a', 'list', 'chain', 'ip', 'leash', 'agent_61002'])).stdout).toBe(bChain);
    expect(await listing()).toContain('redirect to :18011');
    expect(await listing()).not.toContain('redirect to :18001');
  });

  it('repairs a tampered chain on the next apply', async () => {
    await run(['nft', 'add', 'rule', 'ip', 'leash', 'agent_61002', 'accept'], '');
    expect(await applySubject(run, b)).toBe('changed');
    expect(await applySubject(run, b)).toBe('unchanged');
  });

  it('applies many subjects in one transaction, leaving an unchanged one alone', async () => {
    const bBefore = await handlesOf(b.uid);
    const runs: string[] = [];
    // Said to act in the namespace, as the service's runner is: the state is read from the kernel, not by nft.
    const counting: Runner = Object.assign(
      (argv: string[], input?: string) => {
        runs.push(argv.join(' '));
        return run(argv, input);
      },
      { netns: run.netns },
    );
    const more = [61011, 61012, 61013].map((uid, i) => ({ ...b, uid, port: 18021 + i }));
    const out = await applySubjects(counting, [b, ...more]);
    expect(Object.fromEntries(out)).toEqual({ 61002: 'unchanged', 61011: 'added', 61012: 'added', 61013: 'added' });
    expect(runs).toEqual(['nft -f -']); // the one transaction; the read asked the kernel
    const text = await listing();
    for (const s of more) expect(text.match(new RegExp(`${s.uid} : jump agent_${s.uid}`, 'g'))).toHaveLength(3);
    expect(text.match(/meta skuid vmap @agents/g)).toHaveLength(3);
    expect(await handlesOf(b.uid)).toEqual(bBefore);
    for (const s of more) expect(await applySubject(run, s)).toBe('unchanged');
    await releaseSubjects(
      run,
      more.map((s) => s.uid),
    );
  });

  it('releasing one subject removes only its chains and map elements', async () => {
    const bBefore = await handlesOf(b.uid);
    await releaseSubjects(run, [a.uid]);
    const text = await listing();
    expect(text).not.toContain('61001');
    expect(text.match(/61002 : jump agent_61002/g)).toHaveLength(3);
    expect(text).toContain('agent_61002');
    expect(await handlesOf(b.uid)).toEqual(bBefore);
  });

  it('drops a leash table still in the pre-per-UID shape at startup, and leaves the per-UID shape alone', async () => {
    const warned: string[] = [];
    expect(await dropLegacyShape(run, (m) => warned.push(m))).toEqual([]);
    expect(await listing()).toContain('agent_61002');
    const legacy = await run(
      ['nft', '-f', '-'],
      'table ip6 leash { chain output { type nat hook output priority -100; meta skuid 61009 tcp dport 443 redirect to :8443; }; }\n',
    );
    expect(legacy.code).toBe(0);
    expect(await dropLegacyShape(run, (m) => warned.push(m))).toEqual(['ip6 leash']);
    expect(warned.join('\n')).toMatch(/old shape: ip6 leash/);
    const after = await listing();
    expect(after).not.toContain('61009');
    expect(after).toContain('table ip leash'); // the per-UID tables were not touched
    expect(await applySubject(run, b)).toBe('changed'); // ip6 part re-created on the next apply
    expect(await applySubject(run, b)).toBe('unchanged');
    // The shape before the dispatch map (a jump rule per UID in the hooked chain) is old too: left there, such a
    // rule would keep sending its UID to a chain the service no longer keeps.
    const perUid = await run(
      ['nft', '-f', '-'],
      'add chain inet leash_filter agent_61008\nadd rule inet leash_filter output meta skuid 61008 jump agent_61008\n',
    );
    expect(perUid.code).toBe(0);
    expect(await dropLegacyShape(run, (m) => warned.push(m))).toEqual(['inet leash_filter']);
    expect(await listing()).not.toContain('61008');
    expect(await applySubject(run, b)).toBe('changed');
    expect(await applySubject(run, b)).toBe('unchanged');
  });

  it('teardown of the last subject drops the tables', async () => {
    expect(await teardownNetwork(run)).toEqual([b.uid]);
    expect(await listing()).not.toMatch(/leash/);
  });

  describe('without nft', () => {
    // nft "missing": the runner answers as exec would for an absent binary.
    const noNft: () => Runner = () => (argv, input) =>
      argv[0] === 'nft' ? Promise.resolve({ code: 127, stdout: '', stderr: 'nft: not found' }) : run(argv, input);

    it('falls back to iptables for one UID, IPv4 TCP, and says so on stderr', async () => {
      requireProgram('iptables', 'iptables-restore');
      const warnings: string[] = [];
      const fw = await openFirewall({ runner: noNft(), subjects: 1, warn: (m) => warnings.push(m) });
      expect(fw.backend).toBe('iptables');
      expect(warnings.join('\n')).toMatch(/iptables fallback: IPv4 TCP only/);
      expect(await fw.apply({ ...a, port: 18443 })).toBe('added');
      expect(await fw.apply({ ...a, port: 18443 })).toBe('unchanged');
      const rules = (await run(['iptables', '-t', 'nat', '-S', 'OUTPUT'])).stdout;
      expect(rules).toContain('--uid-owner 61001');
      expect(rules).toContain('REDIRECT --to-ports 18443');
      await expect(fw.apply(b)).rejects.toMatchObject({ code: 'iptables_single_subject' });
      await fw.release([a.uid]);
      expect((await run(['iptables', '-t', 'nat', '-S', 'OUTPUT'])).stdout).not.toContain('leash');
    });

    it('refuses several subjects rather than apply one policy to all', async () => {
      await expect(openFirewall({ runner: noNft(), subjects: 2, warn: () => {} })).rejects.toMatchObject({
        code: 'nft_missing_multi',
      });
    });
  });
});

describe.skipIf(!isRoot)('reading the leash tables from the kernel', () => {
  const RNS = 'lt-net-read';
  let run: Runner;
  let cleanup: (() => Promise<void>) | null = null;
  beforeAll(async () => {
    cleanup = await bareNetns(RNS);
    run = netnsRunner(RNS);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  /** The kernel read and nft's own listing agree, scoped and whole. */
  const same = async (uids: number[]) => {
    for (const scope of [uids, undefined]) {
      const kernel = await readState(run, scope);
      const program = await readStateByProgram(run, scope);
      expect(kernel).toEqual(program);
    }
    return readState(run, uids);
  };
  const nft = async (script: string) => {
    const res = await run(['nft', '-f', '-'], script);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
  };

  it('sees what nft sees in every shape the service meets', async () => {
    // No table at all.
    let st = await same([a.uid]);
    expect([...st.values()].every((t) => !t.exists)).toBe(true);
    // Two subjects, in shape.
    await applySubject(run, a);
    await applySubject(run, b);
    st = await same([a.uid, 61099]);
    const ip = st.get('ip leash')!;
    expect(ip.dispatch).toHaveLength(1);
    expect(ip.foreign).toEqual([]);
    expect(ip.elements).toEqual(
      new Map([
        [a.uid, 'agent_61001'],
        [b.uid, 'agent_61002'],
      ]),
    );
    expect(ip.chains.get('agent_61001')).toHaveLength(3);
    expect(ip.chains.has('agent_61099')).toBe(false);
    // A tampered chain (a rule without a comment), an empty chain, a second dispatch rule and a foreign rule.
    await nft(
      [
        'add rule ip leash agent_61001 accept',
        'add chain ip6 leash agent_61099',
        'add rule inet leash_filter output meta skuid vmap @agents',
        'add rule ip6 leash output meta skuid 61009 tcp dport 443 redirect to :8443',
        // Look-alikes of the dispatch rule are foreign: an anonymous map, a negated lookup.
        'add rule inet leash_filter output meta skuid vmap { 61010 : accept }',
        'add set inet leash_filter uids { type uid; }',
        'add rule inet leash_filter output meta skuid != @uids drop',
      ].join('\n') + '\n',
    );
    st = await same([a.uid, b.uid, 61099]);
    expect(st.get('ip leash')!.chains.get('agent_61001')!.at(-1)).toBeNull();
    expect(st.get('ip6 leash')!.chains.get('agent_61099')).toEqual([]);
    expect(st.get('inet leash_filter')!.dispatch).toHaveLength(2);
    expect(st.get('inet leash_filter')!.foreign).toHaveLength(2);
    expect(st.get('ip6 leash')!.foreign).toHaveLength(1);
    // An element whose chain is gone from one table's map: the map and the chains are read apart.
    await nft('delete element ip leash agents { 61002 }\n');
    st = await same([b.uid]);
    expect(st.get('ip leash')!.elements.has(b.uid)).toBe(false);
    expect(st.get('ip leash')!.chains.has('agent_61002')).toBe(true);
    await teardownNetwork(run);
    st = await same([a.uid]);
    expect([...st.values()].every((t) => !t.exists)).toBe(true);
  });

  it("reads a namespace named by the runner, never the process's own", async () => {
    await applySubject(run, a);
    const elsewhere = Object.assign(() => Promise.resolve({ code: 1, stdout: '', stderr: '' }), {
      netns: '/run/netns/lt-net-read-absent',
    });
    // A namespace that is not there: the kernel read gives way to the program's, which here fails.
    await expect(readState(elsewhere, [a.uid])).rejects.toMatchObject({ code: 'nft_failed' });
    const here = await readState(run, [a.uid]);
    expect(here.get('ip leash')!.elements.get(a.uid)).toBe('agent_61001');
    await teardownNetwork(run);
  });
});

describe.skipIf(!isRoot)('leash teardown', () => {
  const TNS = 'lt-net-td';
  let cleanup: (() => Promise<void>) | null = null;
  beforeAll(async () => {
    cleanup = await bareNetns(TNS);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  it('releases the named UID, then every remaining one, leaving no leash table', async () => {
    const run = netnsRunner(TNS);
    await applySubject(run, a);
    await applySubject(run, b);
    const { spawnSync } = await import('node:child_process');
    const cli = (args: string[]) =>
      spawnSync(process.execPath, ['dist/src/cli/main.js', 'teardown', '--netns', TNS, '--json', ...args], {
        encoding: 'utf8',
      });
    const one = cli(['--uid', String(a.uid)]);
    expect(one.status).toBe(0);
    expect(JSON.parse(one.stdout)).toEqual({ released: [a.uid] });
    expect((await run(['nft', 'list', 'ruleset'])).stdout).toContain('agent_61002');
    const rest = cli([]);
    expect(JSON.parse(rest.stdout)).toEqual({ released: [b.uid] });
    expect((await run(['nft', 'list', 'ruleset'])).stdout).not.toMatch(/leash/);
  });
});
