import { describe, expect, it } from 'vitest';
import type { Effective } from '../../../../src/control/policy/fragment.js';
import type { ApplyAction, FailAction, OrphanAction } from '../../../../src/control/reconcile/plan.js';
import { watcherSurface } from '../../../../src/control/reconcile/surfaces/watcher.js';
import { systemLoaders } from '../../../../src/dataplane/watcher/loaders.js';
import type { FsSupervisor } from '../../../../src/dataplane/watcher/index.js';

describe('the filesystem surface over the watcher map', () => {
  it('maps reconcile actions to watcher map entries, never removing a UID', async () => {
    const calls: unknown[][] = [];
    const sup = { set: async (...a: unknown[]) => void calls.push(a) } as unknown as FsSupervisor;
    const surface = watcherSurface(sup, () => 'closed');
    const effective = {
      fail_mode: 'open',
      filesystem: { mode: 'whitelist', allow: ['/w'], deny: [], watch: ['/'] },
      commands: { mode: 'blacklist', allow: [], deny: ['ssh'] },
    } as unknown as Effective;
    expect(await surface.apply([{ uid: 1001, policy: effective } as unknown as ApplyAction])).toEqual(new Map());
    await surface.deny({ uid: 1002 } as unknown as FailAction);
    await surface.orphan({ uid: 1003 } as unknown as OrphanAction);
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
      [1003, null, 'closed'],
    ]);
    // What `leash status` reports: the subject whose entry is a policy, not the ones set to none.
    expect(surface.status().uids).toEqual([1001]);
  });
});
