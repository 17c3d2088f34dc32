import { describe, expect, it } from 'vitest';
import type { Effective } from '../../../../src/control/policy/fragment.js';
import { watcherSubjectOf } from '../../../../src/control/reconcile/execute.js';
import { systemLoaders } from '../../../../src/dataplane/watcher/loaders.js';
import { mapSurface, type FsSupervisor } from '../../../../src/dataplane/watcher/index.js';
import type { WatcherSubject } from '../../../../src/dataplane/watcher/addon.js';

describe('the filesystem surface over the watcher map', () => {
  it('maps reconcile actions to watcher map entries, never removing a UID', async () => {
    const calls: unknown[][] = [];
    const sup = {
      set: async (...a: unknown[]) => void calls.push(a),
      setMany: async (l: WatcherSubject[]) => void calls.push(...l.map((s) => [s.uid, s.policy, s.failMode])),
    } as unknown as Pick<FsSupervisor, 'set' | 'setMany'>;
    const surface = mapSurface(sup, [], 'closed');
    const effective = {
      fail_mode: 'open',
      filesystem: { mode: 'whitelist', allow: ['/w'], deny: [], watch: ['/'] },
      commands: { mode: 'blacklist', allow: [], deny: ['ssh'] },
    } as unknown as Effective;
    expect(await surface.apply([watcherSubjectOf({ uid: 1001, policy: effective })])).toEqual(new Map());
    await surface.deny({ uid: 1002, port: null });
    surface.setFailMode!('open');
    await surface.orphan({ uid: 1003, port: null });
    expect(calls).toEqual([
      [
        1001,
        {
          fail_mode: 'open',
          // namespaces absent: deny, since the filesystem is a whitelist.
          filesystem: { mode: 'whitelist', allow: ['/w'], deny: [], watch: ['/'], namespaces: 'deny' },
          // commands.interpreters absent: the system's dynamic loaders.
          commands: { mode: 'blacklist', allow: [], deny: ['ssh'], interpreters: systemLoaders() },
        },
        'open',
      ],
      [1002, null, 'closed'],
      // The floor's fail_mode as last pushed.
      [1003, null, 'open'],
    ]);
    // What `leash status` reports: the subject whose entry is a policy, not the ones set to none.
    expect(surface.enforcing().uids).toEqual([1001]);
  });

  it("does not send the start's own map twice: the first apply of the very policies it started with only counts them", async () => {
    const sent: number[] = [];
    const sup = {
      set: async (uid: number) => void sent.push(uid),
      setMany: async (l: WatcherSubject[]) => void sent.push(...l.map((s) => s.uid)),
    } as unknown as Pick<FsSupervisor, 'set' | 'setMany'>;
    const effective = {
      fail_mode: 'closed',
      filesystem: { mode: 'blacklist', allow: [], deny: [] },
      commands: { mode: 'blacklist', allow: [], deny: [] },
    } as unknown as Effective;
    const other = { ...effective } as Effective;
    const started = watcherSubjectOf({ uid: 1, policy: effective });
    const surface = mapSurface(sup, [started], 'closed');
    // uid 1: the same compiled object (watcherSubjectOf keeps one per resolved policy); uid 2: new to the watcher.
    await surface.apply([watcherSubjectOf({ uid: 1, policy: effective }), watcherSubjectOf({ uid: 2, policy: other })]);
    expect(sent).toEqual([2]);
    expect(surface.enforcing().uids.sort()).toEqual([1, 2]);
    // Only the first apply: a later one sends every entry.
    await surface.apply([watcherSubjectOf({ uid: 1, policy: effective })]);
    expect(sent).toEqual([2, 1]);
  });
});
